"""The sim target: the request lifecycle over a built Cluster (build.py), driven request by request (Target protocol).

A request's life: ARRIVE, SEND -> router (ROUTE or REJECT) -> prefix lookup down the KV tiers (a load from a
lower tier is a KV_XFER_START/END on that tier's link) -> prefill on the first engine (PREFILL_START/END) ->
colocated: FIRST_TOKEN at the end of the step that completes the prefill, then decode there;
PD: KV_XFER_START/END to the decode engine (layer-wise streaming hides all but the exposed tail), FIRST_TOKEN when
the KV lands, DECODE_START, decode -> LAST_TOKEN, FINISH. Preemption (PREEMPT) recomputes or swaps; STAR rescheduling
moves decoding requests between decode engines (MIGRATE).
"""

from __future__ import annotations

import random
from functools import partial
from typing import TYPE_CHECKING, cast

from kvbench.records import (
    ARRIVE,
    CANCEL,
    DECODE_START,
    ERROR,
    FINISH,
    FIRST_TOKEN,
    KV_XFER_END,
    KV_XFER_START,
    LAST_TOKEN,
    PREEMPT,
    PREFILL_END,
    REJECT,
    ROUTE,
    SEND,
    Request,
)
from kvbench.sim.build import Cluster
from kvbench.sim.cluster import parse_cluster
from kvbench.sim.engine import Engine
from kvbench.sim.job import DONE, HANDOFF, Job
from kvbench.sim.kvcache import Tier, walk
from kvbench.sim.longctx import LongContext
from kvbench.sim.loop import Loop
from kvbench.sim.router import ROUTERS, RouterState, decode_gate
from kvbench.sim.rows import EmitRow, Row
from kvbench.sim.star import Rescheduler
from kvbench.sim.transfer import message_count, overlapped_load_ns, send_all, stream_lead_ns, transfer_ns

if TYPE_CHECKING:  # annotations only: kvbench.target builds this module's SimTarget
    from kvbench.records import Emit
    from kvbench.target import RunContext, TargetSpec


def _not_running(row: Row) -> None:
    raise RuntimeError("SimTarget: events are emitted only inside run()")


class SimTarget:
    """The request lifecycle over a built Cluster: arrival, routing, prefix loads, P->D hand-off, the end."""

    def __init__(self, spec: TargetSpec, ctx: RunContext) -> None:
        cfg = self.cfg = parse_cluster(spec.params, spec.source)
        self.loop = Loop()
        self.emit: EmitRow = _not_running
        rng = random.Random(ctx.seed)
        self.cluster = c = Cluster(cfg, self, self.loop, ctx.log.table("steps").append, random.Random(rng.random()))
        self.route_fn = ROUTERS[cfg.router]
        self.router = RouterState(cfg.params(), rng.randrange(1 << 62))
        self.live: dict[int, Job | None] = {}  # submitted, not ended: rid -> Job (None until it arrives)
        self.longctx = LongContext(c, self.loop, self, cfg.long_context) if cfg.long_context else None
        self.resched = None
        if cfg.reschedule is not None and len(c.decode) > 1:
            self.resched = Rescheduler(c, self.loop, self, cfg.reschedule, ctx.seed)
        # what the per-request paths read, looked up once
        self.chains, self.kv_bytes, self.pbt = c.chains, c.kv_bytes, c.prefix_block_tokens
        self.model, self.gran = c.model, c.gran
        self.layerwise, self.prefix_caching = cfg.transfer.layerwise, cfg.prefix_caching
        self.frontend_ns = cfg.frontend_ns
        self.reject_at_decode = bool(self.router.params.get("reject_at_decode"))
        self.write_through = bool(c.write_through)  # tiers every prefill writes its blocks to (write_blocks)
        self.hostmem = c.hostmem
        self.landed_cb, self.arrive_cb = self._landed, self._arrive  # bound once: scheduled per request

    # ---- Target protocol
    def submit(self, req: Request, at_ns: int) -> None:
        self.live[req.req_id] = None
        self.loop.at_in_order(at_ns, self.arrive_cb, req)

    def run(self, emit: Emit) -> None:
        self.emit = cast(EmitRow, emit)  # the log and the replayer take Event's fields as a plain tuple
        try:
            self.loop.run()
        except KeyboardInterrupt:
            self._cancel_all()
            raise

    def _cancel_all(self) -> None:
        """CANCEL every open request at the moment of the interruption; one not yet arrived gets no ARRIVE."""
        t = self.loop.now_ns
        emit = self.emit
        for rid in list(self.live):
            emit((t, rid, CANCEL, None, None, None, None, None, "interrupted"))
        self.live.clear()
        self.loop.clear()

    # ---- arrival and routing
    def _arrive(self, t: int, req: Request) -> None:
        emit, rid = self.emit, req.req_id
        emit((req.arrival_ns, rid, ARRIVE, None, req.input_tokens, None, None, None, None))
        emit((t, rid, SEND, None, None, None, None, None, None))
        job = Job(req)
        self.live[rid] = job
        if self.frontend_ns:
            self.loop.at(t + self.frontend_ns, self._route, job)
        else:
            self._route(t, job)

    def _route(self, t: int, job: Job) -> None:
        choice = self.route_fn(self.cluster, job, self.router)
        if choice is None:
            return self._end(t, job, REJECT, detail=f"slo: {self.router.reason}")
        first, dec = choice
        need = job.n_in + job.n_out
        longctx = self.longctx
        split = longctx is not None and longctx.applies(job, first)
        if (not split and job.n_in > first.kv_total) or need > (dec or first).kv_total:
            where = dec or first
            return self._end(
                t,
                job,
                ERROR,
                detail=f"context_too_long: {need} tokens exceed the KV capacity "
                f"of {where.name} ({where.kv_total} tokens)",
            )
        job.decode = dec
        self.emit((t, job.rid, ROUTE, first.name, None, None, None, None, dec.name if dec else None))
        if self.resched is not None:
            self.resched.wake(t)
        if longctx is not None and split:
            return longctx.split(t, job, first)
        if self.prefix_caching and job.req.hash_ids and first.hbm is not None:
            self._prefix(t, job, first)
        else:
            first.enqueue(job, t)

    def _prefix(self, t: int, job: Job, e: Engine) -> None:
        """Serve the longest cached prefix; blocks from lower tiers are loaded only if that beats recomputing."""
        hashes, pbt = job.req.hash_ids, self.pbt
        chain = self.chains[e]
        counts, lead = walk(hashes, chain)  # lead: the HBM-only prefix (HBM's leading run)
        total = sum(counts)
        if not total:
            return e.enqueue(job, t)
        cost, n_in = e.pricer.cost, job.n_in
        hbm_tok = lead * pbt if lead * pbt < n_in - 1 else n_in - 1
        all_tok = total * pbt if total * pbt < n_in - 1 else n_in - 1
        load = all_tok > hbm_tok and max(
            transfer_ns(tier.wire().link, c * pbt * self.kv_bytes, c) for tier, c in zip(chain[1:], counts[1:]) if c
        ) < cost.prefill_ns(n_in - hbm_tok, hbm_tok) - cost.prefill_ns(n_in - all_tok, all_tok)
        cached = all_tok if load else hbm_tok
        job.cached, job.ctx, job.prefill_left = cached, cached, n_in - cached
        if counts[0] and e.hbm is not None:
            e.hbm.touch(hashes[:total], lead)  # a hit refreshes the blocks' LRU position (the lead ones are held)
        if not load:
            job.hit_tier = "hbm" if lead else None
            return e.enqueue(job, t)
        deepest = max(i for i, c in enumerate(counts) if c)
        job.hit_tier = chain[deepest].kind
        self._load(t, job, e, chain, counts, hashes[:total], chain[deepest].wire().link.name, cached - hbm_tok)

    def _load(
        self,
        t: int,
        job: Job,
        e: Engine,
        chain: list[Tier],
        counts: list[int],
        hashes: tuple[int, ...],
        link_name: str,
        tokens: int,
    ) -> None:
        """Bring the lower tiers' blocks into HBM, each tier over its own link, in parallel."""
        c_, pbt = self.cluster, self.pbt
        sends, nbytes, names, placed = [], 0, [], t
        for tier, c in zip(chain[1:], counts[1:]):
            if c:
                msgs = message_count(self.model, c * pbt, e.block_tokens, self.gran)
                if tier is c_.pool and c_.replicas is not None:  # placed copies: the holders' links carry it too
                    placed = c_.replicas.read(t, hashes, chain[:-1], e.node, e.block_tokens)
                else:
                    link = tier.wire() if tier is not c_.pool else c_.pool_link_on(e.node)
                    sends.append((link, c * pbt * self.kv_bytes, msgs))
                nbytes += c * pbt * self.kv_bytes
                tier.hit_blocks += c
                tier.touch(hashes)  # promotion leaves the lower copy, refreshed
                names.append(f"{tier.kind}={c * pbt}")
        self.emit((t, job.rid, KV_XFER_START, e.name, tokens, None, link_name, nbytes, "load " + ",".join(names)))
        job.engine = e
        hidden = None
        if job.hit_tier in c_.layerwise_loads:  # the prefill starts as the first layers land (KV_XFER_END then)
            p_ns, layers = e.pricer.cost.prefill_ns(job.prefill_left, job.cached), self.model.n_layers
            hidden = partial(overlapped_load_ns, prefill_ns=p_ns, layers=layers)
        send_all(self.loop, t, sends, self._loaded, job, hidden, placed)

    def _loaded(self, t: int, job: Job) -> None:
        e = job.engine
        link = next(tier.wire().link.name for tier in self.chains[e] if tier.kind == job.hit_tier)
        self.emit((t, job.rid, KV_XFER_END, e.name, job.cached, None, link, None, "load"))
        e.enqueue(job, t)

    # ---- engine callbacks
    def prefill_done(self, e: Engine, job: Job, t: int) -> None:
        if job.parent is not None:
            assert self.longctx is not None  # only the long-context split makes part jobs
            return self.longctx.part_done(e, job, t)
        emit, rid = self.emit, job.rid
        detail = "recompute" if job.first_ns >= 0 else None
        emit((t, rid, PREFILL_END, e.name, job.n_in - job.cached, job.cached, None, None, detail))
        if job.first_ns >= 0:  # recomputed after preemption: carry on decoding
            return e.start_decode(job, job.steps_left)
        if job.n_out == 0:
            e.release(job, t)
            return self._end(t, job, FINISH, e.name, tokens=0)
        if job.decode is None:
            job.first_ns = t
            emit((t, rid, FIRST_TOKEN, e.name, 1, job.cached, job.hit_tier, None, None))
            if job.n_out == 1:
                e.release(job, t)
                return self._finish(t, job, e)
            self.emit((t, job.rid, DECODE_START, e.name, None, None, None, None, None))
            e.start_decode(job, e.pricer.steps_for(job.n_out - 1))
            return
        job.state = HANDOFF  # e.handoff(job), written out: its KV stays reserved on e until the transfer is done
        dec = job.decode
        if self.reject_at_decode and (why := decode_gate(job, dec, self.router)):
            self.cluster.write_blocks(e, job.req.hash_ids, t)
            e.release(job, t)  # Mooncake's reject-at-each-stage baseline: the prefill's work is lost
            return self._end(t, job, REJECT, e.name, detail=f"slo: {why}")
        job.ctx = job.n_in
        if dec.try_reserve(job, job.ctx):
            self._transfer(t, job, e, dec, overlap=True)
        else:
            dec.incoming.append(job)
        if self.write_through:
            self.cluster.write_blocks(
                e, job.req.hash_ids, t
            )  # after the transfer: a request never waits on its own write

    def incoming_ready(self, e: Engine, job: Job, t: int) -> None:
        """A decode engine found KV room for a waiting hand-off: its transfer starts now (no overlap left)."""
        if job.parts:
            assert self.longctx is not None  # only the long-context split makes part jobs
            return self.longctx.transfer(t, job)
        if self.hostmem.swapped and self.hostmem.swap_in(e, job, t):
            return  # a swapped-out request comes back from DRAM
        self._transfer(t, job, job.engine, e, overlap=False)

    def _transfer(self, t: int, job: Job, src: Engine, dst: Engine, overlap: bool) -> None:
        c = self.cluster
        tokens = job.ctx
        nbytes = tokens * self.kv_bytes
        msgs = message_count(self.model, tokens, src.block_tokens, self.gran)
        shared, detail = c.p2d(src, dst)
        spec = shared.link
        job.xfer_link = spec.name
        begin = t
        if overlap and self.layerwise:
            # Layer-wise streaming during the prefill: pretend the transfer began early enough that, on an idle
            # link, only the exposed tail is left after the prefill ends.
            p_ns = src.pricer.cost.prefill_ns(job.n_in - job.cached, job.cached)
            begin = t - stream_lead_ns(spec, nbytes, msgs, p_ns, self.model.n_layers)
            if begin < 0:
                begin = 0
        if begin < t:  # the event marks the exposed tail (what TTFT pays); the detail keeps the wire's start
            detail = f"{detail} layerwise_from_ns={begin}"
        self.emit((t, job.rid, KV_XFER_START, src.name, tokens, None, spec.name, nbytes, detail))
        shared.send(begin, nbytes, msgs, self.landed_cb, job)

    def _landed(self, t: int, job: Job) -> None:
        dec, ctx = job.decode, job.ctx
        self.emit((t, job.rid, KV_XFER_END, dec.name, ctx, None, job.xfer_link, ctx * self.kv_bytes, None))
        job.engine.release(job, t)
        if self.hostmem.landing and self.hostmem.land(t, job, self._in_hbm):  # decode_landed, written out
            return
        self._in_hbm(t, job)

    def decode_landed(self, t: int, job: Job) -> None:
        """The prompt's KV is on the decode node: in HBM now, or first in DRAM (kv_landing = "dram")."""
        if self.hostmem.landing and self.hostmem.land(t, job, self._in_hbm):
            return
        self._in_hbm(t, job)

    def _in_hbm(self, t: int, job: Job) -> None:
        """The prompt's KV is in the decode engine's HBM: first token, then decode there."""
        dec = job.decode
        emit, rid = self.emit, job.rid
        job.engine = dec
        job.first_ns = t
        emit((t, rid, FIRST_TOKEN, dec.name, 1, job.cached, job.hit_tier, None, None))
        if job.n_out == 1:
            dec.release(job, t)
            return self._finish(t, job, dec)
        emit((t, rid, DECODE_START, dec.name, None, None, None, None, None))
        dec.join_decode(job, dec.pricer.steps_for(job.n_out - 1), t)

    def decode_done(self, e: Engine, job: Job, t: int) -> None:
        e.cache(job)
        self._finish(t, job, e)

    def _finish(self, t: int, job: Job, e: Engine) -> None:
        self.emit((t, job.rid, LAST_TOKEN, e.name, job.n_out, None, None, None, None))
        self._end(t, job, FINISH, e.name, tokens=job.n_out)

    def preempted(self, e: Engine, job: Job, t: int) -> None:
        self.emit((t, job.rid, PREEMPT, e.name, job.prefill_left, None, None, None, "recompute"))

    def _end(
        self,
        t: int,
        job: Job,
        kind: str,
        instance: str | None = None,
        tokens: int | None = None,
        detail: str | None = None,
    ) -> None:
        job.state = DONE
        del self.live[job.rid]
        cached = job.cached if kind == FINISH else None
        self.emit((t, job.rid, kind, instance, tokens, cached, None, None, detail))
