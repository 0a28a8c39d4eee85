"""The sim target: a simulated serving cluster built from a profile, driven request by request (Target protocol).

A request's life: ARRIVE, SEND -> router (ROUTE or REJECT) -> prefix lookup down the KV tiers (a load from a
lower tier is a KV_XFER_START/END on that tier's link) -> prefill on the first engine (PREFILL_START/END) ->
colocated: FIRST_TOKEN at the end of the step that completes the prefill, then decode there;
PD: KV_XFER_START/END to the decode engine (layer-wise streaming hides all but the exposed tail), FIRST_TOKEN when
the KV lands, DECODE_START, decode -> LAST_TOKEN, FINISH. Preemption (PREEMPT) recomputes; STAR rescheduling
moves decoding requests between decode engines (MIGRATE).
"""

from __future__ import annotations

import random

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
from kvbench.sim.build import Links, make_engines, make_tiers, pool_costs
from kvbench.sim.cluster import location, parse_cluster
from kvbench.sim.job import DONE, HANDOFF, Job
from kvbench.sim.kvcache import walk
from kvbench.sim.longctx import LongContext
from kvbench.sim.loop import Loop
from kvbench.sim.router import ROUTERS, RouterState
from kvbench.sim.transfer import Granularity, exposed_ns, message_count, transfer_ns
from kvbench.target import RunContext, TargetSpec


class SimTarget:
    def __init__(self, spec: TargetSpec, ctx: RunContext):
        cfg = self.cfg = parse_cluster(spec.params, spec.source)
        self.loop = Loop()
        self.emit = None
        rng = random.Random(ctx.seed)
        self.links = Links()
        for key, ref in (
            ("transfer.link", cfg.transfer.link),
            ("transfer.intra_link", cfg.transfer.intra_link),
            ("reschedule.link", cfg.reschedule.link if cfg.reschedule else None),
        ):
            if ref is not None:  # check names now: a bad one must fail before the simulation, not mid-run
                self.links.spec(ref, location(cfg.source, key))
        costs = pool_costs(cfg)
        first_cost = next(iter(costs.values()))
        self.model = first_cost.model
        self.kv_bytes = self.model.kv_bytes_per_token()
        self.gran = Granularity(cfg.transfer.granularity)
        self.engines, n_nodes = make_engines(
            cfg, self, costs, self.links, ctx.log.table("steps").append, random.Random(rng.random())
        )
        self.node_tiers, self.pool = make_tiers(cfg, n_nodes, self.kv_bytes, self.links)
        self.pool_link = next((tc.link for tc in cfg.tiers if tc.kind == "pool"), None)
        for e in self.engines:
            if e.hbm is not None:
                e.hbm.below = self._chain_below(e.node)
        self.by_role: dict[str, list] = {}
        for e in self.engines:
            self.by_role.setdefault(e.role, []).append(e)
        self.first = [e for e in self.engines if e.role in ("colocated", "prefill", "pre_prefill")]
        self.decode = self.by_role.get("decode", [])
        self.chains = {
            e: [t for t in [e.hbm, *self.node_tiers[e.node].values(), self.pool] if t is not None] for e in self.first
        }
        self.route_fn = ROUTERS[cfg.router]
        self.router = RouterState(cfg.params(), rng.randrange(1 << 62))
        self.write_through = [
            t for t in self.shared_chain() if any(tc.kind == t.kind and tc.write_through for tc in cfg.tiers)
        ]
        self._hot_paths(cfg)
        self.live: dict[int, Job | None] = {}  # submitted, not ended: rid -> Job (None until it arrives)
        self.resched = None
        self.longctx = LongContext(self, cfg.long_context) if cfg.long_context else None
        if cfg.reschedule is not None and len(self.decode) > 1:
            from kvbench.sim.star import Rescheduler

            self.resched = Rescheduler(self, cfg.reschedule, ctx.seed)

    def _hot_paths(self, cfg) -> None:
        """What the per-request paths read, looked up once."""
        self.p2d_links: dict[tuple[int, int], tuple] = {}  # (src index, dst index) -> (SharedLink, detail)
        self.layerwise = cfg.transfer.layerwise
        self.frontend_ns, self.prefix_caching, self.pbt = cfg.frontend_ns, cfg.prefix_caching, cfg.prefix_block_tokens
        self.landed_cb, self.arrive_cb = self._landed, self._arrive  # bound once: scheduled per request

    # ---- helpers for routers and tiers
    def _chain_below(self, node: int):
        tiers = self.node_tiers[node]
        return tiers.get("dram") or tiers.get("ssd") or self.pool

    def node_tier(self, engine, kind: str):
        return self.node_tiers[engine.node].get(kind)

    def shared_chain(self) -> list:
        """Tiers every prefill instance can load from: the first node's DRAM/SSD stand for 'a node' and the pool."""
        node0 = self.node_tiers.get(0, {})
        return [t for t in [*node0.values(), self.pool] if t is not None]

    # ---- Target protocol
    def submit(self, req: Request, at_ns: int) -> None:
        self.live[req.req_id] = None
        self.loop.at_in_order(at_ns, self.arrive_cb, req)

    def run(self, emit) -> None:
        self.emit = emit
        try:
            self.loop.run()
        except KeyboardInterrupt:
            self._cancel_all()
            raise

    def _cancel_all(self) -> None:
        t = self.loop.now_ns
        emit = self.emit
        pending = {arg.req_id: arg for _, _, fn, arg in self.loop.pending() if fn == self._arrive}
        for rid in list(self.live):
            if rid in pending:
                req = pending[rid]
                emit((min(req.arrival_ns, t), rid, ARRIVE, None, req.input_tokens, None, None, None, None))
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
        choice = self.route_fn(self, job, self.router)
        if choice is None:
            return self._end(t, job, REJECT, detail=f"slo: {self.router.reason}")
        first, dec = choice
        need = job.n_in + job.n_out
        split = self.longctx is not None and self.longctx.applies(job, first)
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
        if split:
            return self.longctx.split(t, job, first)
        if self.prefix_caching and job.req.hash_ids and first.hbm is not None:
            self._prefix(t, job, first)
        else:
            first.enqueue(job, t)

    def _prefix(self, t: int, job: Job, e) -> None:
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
            transfer_ns(tier.link.link, c * pbt * self.kv_bytes, c) for tier, c in zip(chain[1:], counts[1:]) if c
        ) < cost.prefill_ns(n_in - hbm_tok, hbm_tok) - cost.prefill_ns(n_in - all_tok, all_tok)
        cached = all_tok if load else hbm_tok
        job.cached, job.ctx, job.prefill_left = cached, cached, n_in - cached
        if counts[0]:
            e.hbm.touch(hashes[:total], lead)  # a hit refreshes the blocks' LRU position (the lead ones are held)
        if not load:
            job.hit_tier = "hbm" if lead else None
            return e.enqueue(job, t)
        deepest = max(i for i, c in enumerate(counts) if c)
        job.hit_tier = chain[deepest].kind
        self._load(t, job, e, chain, counts, hashes[:total], chain[deepest].link.link.name, cached - hbm_tok)

    def _load(self, t: int, job: Job, e, chain, counts, hashes, link_name: str, tokens: int) -> None:
        """Bring the lower tiers' blocks into HBM, each tier over its own link, in parallel."""
        pbt = self.cfg.prefix_block_tokens
        end, nbytes, names = t, 0, []
        for tier, c in zip(chain[1:], counts[1:]):
            if c:
                msgs = message_count(self.model, c * pbt, e.bs, self.gran)
                # Pool blocks are spread over all nodes (hot ones replicated, as Mooncake Store does), so the
                # bottleneck is the loading node's own NIC: one shared link per destination node.
                link = tier.link if tier is not self.pool else self.links.on(e.node, self.pool_link)
                end = max(end, link.start(t, c * pbt * self.kv_bytes, msgs))
                nbytes += c * pbt * self.kv_bytes
                tier.hit_blocks += c
                tier.touch(hashes)  # promotion leaves the lower copy, refreshed
                names.append(f"{tier.kind}={c * pbt}")
        self.emit((t, job.rid, KV_XFER_START, e.name, tokens, None, link_name, nbytes, "load " + ",".join(names)))
        job.engine = e
        self.loop.at(end, self._loaded, job)

    def _loaded(self, t: int, job: Job) -> None:
        e = job.engine
        link = next(tier.link.link.name for tier in self.chains[e] if tier.kind == job.hit_tier)
        self.emit((t, job.rid, KV_XFER_END, e.name, job.cached, None, link, None, "load"))
        e.enqueue(job, t)

    # ---- engine callbacks
    def prefill_done(self, e, job: Job, t: int) -> None:
        if job.parent is not None:
            return self.longctx.part_done(e, job, t)
        emit, rid = self.emit, job.rid
        emit(
            (
                t,
                rid,
                PREFILL_END,
                e.name,
                job.n_in - job.cached,
                job.cached,
                None,
                None,
                "recompute" if job.first_ns >= 0 else None,
            )
        )
        if job.first_ns >= 0:  # recomputed after preemption: carry on decoding
            return e.start_decode(job, job.steps_left)
        if job.n_out == 0:
            e.release(job, t)
            return self._end(t, job, FINISH, e.name, tokens=0)
        if job.decode is None:
            self._first_token(t, job, e)
            if job.n_out == 1:
                e.release(job, t)
                return self._finish(t, job, e)
            self.emit((t, job.rid, DECODE_START, e.name, None, None, None, None, None))
            e.start_decode(job, e.pricer.steps_for(job.n_out - 1))
            return
        job.state = HANDOFF  # e.handoff(job), written out: its KV stays reserved on e until the transfer is done
        for tier in self.write_through:
            tier.insert(job.req.hash_ids)
        dec = job.decode
        job.ctx = job.n_in
        if dec.try_reserve(job, job.ctx):
            self._transfer(t, job, e, dec, overlap=True)
        else:
            dec.incoming.append(job)

    def incoming_ready(self, dec, job: Job, t: int) -> None:
        """A decode engine found KV room for a waiting hand-off: its transfer starts now (no overlap left)."""
        if job.parts:
            return self.longctx.transfer(t, job)
        self._transfer(t, job, job.engine, dec, overlap=False)

    def p2d_link(self, src, dst) -> str:
        return self._p2d(src, dst)[0].link.name

    def _p2d(self, src, dst):
        """(SharedLink, event detail) of P->D transfers from src to dst (looked up once per engine pair)."""
        found = self.p2d_links.get((src.index, dst.index))
        if found is None:
            t = self.cfg.transfer
            shared = self.links.on(src.node, t.intra_link if src.node == dst.node else t.link)
            found = self.p2d_links[(src.index, dst.index)] = (shared, f"to {dst.name}")
        return found

    def _transfer(self, t: int, job: Job, src, dst, overlap: bool) -> None:
        tokens = job.ctx
        nbytes = tokens * self.kv_bytes
        msgs = message_count(self.model, tokens, src.bs, self.gran)
        shared, detail = self._p2d(src, dst)
        spec = shared.link
        begin = t
        if overlap and self.layerwise:
            # Layer-wise streaming during the prefill: pretend the transfer began early enough that, on an idle
            # link, only the exposed tail is left after the prefill ends.
            full = transfer_ns(spec, nbytes, msgs)
            p_ns = src.pricer.cost.prefill_ns(job.n_in - job.cached, job.cached)
            begin = max(0, t - (full - exposed_ns(spec, nbytes, msgs, p_ns, self.model.n_layers)))
        end = shared.start(begin, nbytes, msgs)
        if begin < t:  # the event marks the exposed tail (what TTFT pays); the detail keeps the wire's start
            detail = f"{detail} layerwise_from_ns={begin}"
        self.emit((t, job.rid, KV_XFER_START, src.name, tokens, None, spec.name, nbytes, detail))
        self.loop.at(end if end > t else t, self.landed_cb, job)

    def _landed(self, t: int, job: Job) -> None:
        link = self._p2d(job.engine, job.decode)[0].link.name
        self.emit((t, job.rid, KV_XFER_END, job.decode.name, job.ctx, None, link, job.ctx * self.kv_bytes, None))
        job.engine.release(job, t)
        self.decode_landed(t, job)

    def decode_landed(self, t: int, job: Job) -> None:
        """The prompt's KV is on the decode engine: first token, then decode there."""
        dec = job.decode
        emit, rid = self.emit, job.rid
        job.engine = dec
        self._first_token(t, job, dec)
        if job.n_out == 1:
            dec.release(job, t)
            return self._finish(t, job, dec)
        emit((t, rid, DECODE_START, dec.name, None, None, None, None, None))
        dec.join_decode(job, dec.pricer.steps_for(job.n_out - 1), t)

    def _first_token(self, t: int, job: Job, e) -> None:
        job.first_ns = t
        self.emit((t, job.rid, FIRST_TOKEN, e.name, 1, job.cached, job.hit_tier, None, None))

    def decode_done(self, e, job: Job, t: int) -> None:
        e.cache(job)
        self._finish(t, job, e)

    def _finish(self, t: int, job: Job, e) -> None:
        self.emit((t, job.rid, LAST_TOKEN, e.name, job.n_out, None, None, None, None))
        self._end(t, job, FINISH, e.name, tokens=job.n_out)

    def preempted(self, e, job: Job, t: int) -> None:
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
