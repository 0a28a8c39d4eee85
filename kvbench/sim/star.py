"""STAR-style decode rescheduling: every interval, move decoding requests (with their KV) from the most to the
least loaded decode instance, by a remaining-output-length predictor whose relative error is a parameter."""

from __future__ import annotations

from kvbench.records import MIGRATE
from kvbench.sim.cluster import RescheduleCfg
from kvbench.sim.job import DECODE, Job
from kvbench.sim.transfer import messages_for


class Rescheduler:
    """Load of a decode instance = sum over its batch of predicted remaining steps x current context: the KV-time
    the instance still has to serve. Prediction = true remaining x (1 + e), e uniform in [-error, +error],
    drawn per request from the run seed (stable across rounds, so a request is not re-judged at random)."""

    __slots__ = ("sim", "cfg", "seed", "ticking", "migrating")

    def __init__(self, sim, cfg: RescheduleCfg, seed: int):
        self.sim, self.cfg, self.seed = sim, cfg, seed
        self.ticking = False
        self.migrating: set[int] = set()

    def wake(self, t: int) -> None:
        if not self.ticking:
            self.ticking = True
            self.sim.loop.at(t + self.cfg.interval_ns, self._tick)

    def _noise(self, rid: int) -> float:
        x = ((rid * 2654435761 + self.seed * 40503 + 12345) % 1_000_003) / 1_000_003  # deterministic U[0, 1)
        return 1.0 + self.cfg.predictor_error * (2.0 * x - 1.0)

    def _batch(self, e) -> list[tuple[float, Job]]:
        out = []
        for end, _, job in e.decode_heap:
            if job.state is DECODE and job.engine is e and job.end_step == end and job.rid not in self.migrating:
                left = end - e.steps
                ctx = job.kv + (e.steps - job.join_step) * e.kv_per_step
                out.append((left * self._noise(job.rid) * (ctx + left / 2), job))
        return out

    def _tick(self, t: int, _arg=None) -> None:
        sim = self.sim
        if not sim.live:
            self.ticking = False
            return
        sim.loop.at(t + self.cfg.interval_ns, self._tick)
        batches = {e: self._batch(e) for e in sim.decode}
        loads = {e: sum(p for p, _ in b) for e, b in batches.items()}
        for _ in range(self.cfg.max_migrations):
            src = max(sim.decode, key=lambda e: (loads[e], -e.index))
            dst = min(sim.decode, key=lambda e: (loads[e], e.index))
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
            src.detach(job, lambda j, left, tt, dst=dst: self._move(j, left, tt, dst), t)

    def _move(self, job: Job, left: int, t: int, dst) -> None:
        sim, src = self.sim, job.engine
        tokens = job.ctx
        if not dst.try_reserve(job, tokens):  # room went meanwhile: stay put
            self.migrating.discard(job.rid)
            src._take(job, tokens)
            src.join_decode(job, left, t)
            return
        nbytes = tokens * sim.kv_bytes
        msgs, _ = messages_for(sim.model, tokens, src.block_tokens, sim.gran)
        shared = sim.links.on(src.node, self.cfg.link if src.node != dst.node else sim.cfg.transfer.intra_link)
        end = max(t, shared.start(t, nbytes, msgs))
        sim.emit((t, job.rid, MIGRATE, src.name, tokens, None, shared.link.name, nbytes, f"to {dst.name}"))
        sim.loop.at(end, self._arrived, (job, left, dst))

    def _arrived(self, t: int, arg) -> None:
        job, left, dst = arg
        self.migrating.discard(job.rid)
        dst.join_decode(job, left, t)
