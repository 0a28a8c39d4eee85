"""Long-context prefill split across prefill instances (Mooncake CPP / context parallelism) and its communication.

A prompt of at least `threshold_tokens` is cut into n contiguous slices, one per prefill instance (the routed one
plus the n-1 with the least queued prefill). Slice i (tokens [s_i, e_i)) runs as a part job on its instance: it
computes e_i - s_i tokens attending to s_i earlier ones, and reserves KV only for its own slice.
Communication before slice i may start:
* context_parallel: the KV of the s_i earlier tokens comes from the other ranks (ring attention), over the
  inter-node link (`transfer.link`), exposed in full (a conservative bound: real rings overlap part of it);
* pipeline (Mooncake CPP): only activations cross a stage boundary: (e_i - s_i) x hidden x 2 bytes, one message.
When every slice is done the request's PREFILL_END is emitted and each slice's KV moves to the decode instance
over its own node's link, in parallel; the first token comes when the last slice has landed.
"""

from __future__ import annotations

from kvbench.records import KV_XFER_END, KV_XFER_START, PREFILL_END
from kvbench.sim.cluster import LongContextCfg
from kvbench.sim.job import Job
from kvbench.sim.transfer import messages_for, transfer_ns


class LongContext:
    __slots__ = ("sim", "cfg")

    def __init__(self, sim, cfg: LongContextCfg):
        self.sim, self.cfg = sim, cfg

    def applies(self, job: Job, first) -> bool:
        return job.n_in >= self.cfg.threshold_tokens and first.role in ("prefill", "pre_prefill")

    def split(self, t: int, job: Job, first) -> None:
        sim, n = self.sim, self.cfg.instances
        others = sorted(
            (e for e in sim.first if e is not first and e.role == first.role), key=lambda e: (e.queued_tokens, e.index)
        )[: n - 1]
        engines = [first, *others]
        size = job.n_in // len(engines)
        job.engine, job.pending = first, len(engines)
        job.parts = []  # () until split: no list per request
        link = sim.links.on(first.node, sim.cfg.transfer.link).link
        hidden = sim.model.hidden
        for i, e in enumerate(engines):
            start = i * size
            end = job.n_in if i == len(engines) - 1 else start + size
            part = Job(job.req)
            part.parent, part.base, part.ctx, part.prefill_left = job, start, start, end - start
            job.parts.append(part)
            if not start:
                e.enqueue(part, t)
                continue
            if self.cfg.mode == "context_parallel":
                msgs, _ = messages_for(sim.model, start, e.block_tokens, sim.gran)
                delay = transfer_ns(link, start * sim.kv_bytes, msgs)
            else:
                delay = transfer_ns(link, (end - start) * hidden * 2, 1)
            part.engine = e
            sim.loop.at(t + delay, self._start_part, part)

    def _start_part(self, t: int, part: Job) -> None:
        part.engine.enqueue(part, t)

    def part_done(self, e, part: Job, t: int) -> None:
        e.handoff(part)
        job = part.parent
        job.pending -= 1
        if job.pending:
            return
        sim = self.sim
        sim.emit(
            (
                t,
                job.rid,
                PREFILL_END,
                job.engine.name,
                job.n_in,
                0,
                None,
                None,
                f"split over {len(job.parts)} instances ({self.cfg.mode})",
            )
        )
        job.ctx = job.n_in
        if job.decode.try_reserve(job, job.ctx):
            self.transfer(t, job)
        else:
            job.decode.incoming.append(job)

    def transfer(self, t: int, job: Job) -> None:
        """Every slice's KV goes to the decode instance over its own node's link, in parallel."""
        sim, dst, end, nbytes = self.sim, job.decode, t, 0
        for part in job.parts:
            src, tokens = part.engine, part.ctx - part.base
            ref = sim.cfg.transfer.intra_link if src.node == dst.node else sim.cfg.transfer.link
            msgs, _ = messages_for(sim.model, tokens, src.block_tokens, sim.gran)
            end = max(end, sim.links.on(src.node, ref).start(t, tokens * sim.kv_bytes, msgs))
            nbytes += tokens * sim.kv_bytes
        name = sim.links.spec(sim.cfg.transfer.link, "").name
        sim.emit(
            (
                t,
                job.rid,
                KV_XFER_START,
                job.engine.name,
                job.n_in,
                None,
                name,
                nbytes,
                f"to {dst.name} from {len(job.parts)} instances",
            )
        )
        sim.loop.at(end, self._landed, job)

    def _landed(self, t: int, job: Job) -> None:
        sim = self.sim
        for part in job.parts:
            part.engine.release(part, t)
        name = sim.links.spec(sim.cfg.transfer.link, "").name
        sim.emit((t, job.rid, KV_XFER_END, job.decode.name, job.n_in, None, name, job.n_in * sim.kv_bytes, None))
        job.parts = []
        sim.decode_landed(t, job)
