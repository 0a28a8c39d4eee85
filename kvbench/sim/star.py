"""STAR-style decode rescheduling: every interval, move decoding requests (with their KV) from the most to the
least loaded decode instance, by a remaining-output-length predictor whose relative error is a parameter."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from functools import partial
from typing import Any, Protocol

from kvbench.records import MIGRATE
from kvbench.sim.cluster import RescheduleCfg
from kvbench.sim.engine import Engine
from kvbench.sim.job import DECODE, Job
from kvbench.sim.loop import Loop
from kvbench.sim.rows import EmitRow
from kvbench.sim.transfer import LinkRef, SharedLink


class RescheduleView(Protocol):
    """What the rescheduler sees of the built cluster (kvbench.sim.build.Cluster)."""

    @property
    def decode(self) -> Sequence[Engine]: ...

    @property
    def kv_bytes(self) -> int: ...

    def messages(self, tokens: int, block_tokens: int) -> int: ...

    def link_between(self, src: Engine, dst: Engine, between_nodes: LinkRef) -> SharedLink: ...


class RescheduleHost(Protocol):
    """What the rescheduler reads of the request lifecycle: the event sink, and whether requests are in flight."""

    emit: EmitRow

    @property
    def live(self) -> Sized: ...


class Rescheduler:
    """Load of a decode instance = sum over its batch of predicted remaining steps x current context: the KV-time
    the instance still has to serve. Prediction = true remaining x (1 + e), e uniform in [-error, +error],
    drawn per request from the run seed (stable across rounds, so a request is not re-judged at random)."""

    __slots__ = ("cluster", "loop", "host", "cfg", "seed", "ticking", "migrating")

    def __init__(
        self, cluster: RescheduleView, loop: Loop, host: RescheduleHost, cfg: RescheduleCfg, seed: int
    ) -> None:
        self.cluster, self.loop, self.host, self.cfg, self.seed = cluster, loop, host, cfg, seed
        self.ticking = False
        self.migrating: set[int] = set()

    def wake(self, t: int) -> None:
        if not self.ticking:
            self.ticking = True
            self.loop.at(t + self.cfg.interval_ns, self._tick)

    def _noise(self, rid: int) -> float:
        x = ((rid * 2654435761 + self.seed * 40503 + 12345) % 1_000_003) / 1_000_003  # deterministic U[0, 1)
        return 1.0 + self.cfg.predictor_error * (2.0 * x - 1.0)

    def _batch(self, e: Engine) -> list[tuple[float, Job]]:
        out = []
        for end, _, job in e.decode_heap:
            if job.state is DECODE and job.engine is e and job.end_step == end and job.rid not in self.migrating:
                left = end - e.steps
                ctx = job.kv + (e.steps - job.join_step) * e.kv_per_step
                out.append((left * self._noise(job.rid) * (ctx + left / 2), job))
        return out

    def _tick(self, t: int, _arg: Any = None) -> None:
        if not self.host.live:
            self.ticking = False
            return
        self.loop.at(t + self.cfg.interval_ns, self._tick)
        decode = self.cluster.decode
        batches = {e: self._batch(e) for e in decode}
        loads = {e: sum(p for p, _ in b) for e, b in batches.items()}
        for _ in range(self.cfg.max_migrations):
            src = max(decode, key=lambda e: (loads[e], -e.index))
            dst = min(decode, key=lambda e: (loads[e], e.index))
            gap = loads[src] - loads[dst]
            if src is dst or loads[src] <= (1 + self.cfg.imbalance) * loads[dst] or not batches[src]:
                return
            # the request whose predicted load is closest to half the gap evens the two out best
            pred, job = min(batches[src], key=lambda pj: (abs(pj[0] - gap / 2), pj[1].rid))
            if pred >= gap:
                return
            ctx = job.kv + (src.steps - job.join_step) * src.kv_per_step
            if dst.free_tokens() - dst.watermark < ctx + job.n_out:
                return
            batches[src].remove((pred, job))
            loads[src] -= pred
            loads[dst] += pred
            self.migrating.add(job.rid)
            src.detach(job, partial(self._move, dst=dst), t)

    def _move(self, job: Job, left: int, t: int, dst: Engine) -> None:
        src, tokens = job.engine, job.ctx
        if not dst.try_reserve(job, tokens):  # room went meanwhile: stay put
            self.migrating.discard(job.rid)
            src.take(job, tokens)
            src.join_decode(job, left, t)
            return
        nbytes = tokens * self.cluster.kv_bytes
        msgs = self.cluster.messages(tokens, src.block_tokens)
        shared = self.cluster.link_between(src, dst, self.cfg.link)
        self.host.emit((t, job.rid, MIGRATE, src.name, tokens, None, shared.link.name, nbytes, f"to {dst.name}"))
        shared.send(t, nbytes, msgs, self._arrived, (job, left, dst))

    def _arrived(self, t: int, arg: tuple[Job, int, Engine]) -> None:
        job, left, dst = arg
        self.migrating.discard(job.rid)
        dst.join_decode(job, left, t)
