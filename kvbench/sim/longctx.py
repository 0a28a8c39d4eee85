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

from collections.abc import Sequence
from typing import Protocol

from kvbench.records import KV_XFER_END, KV_XFER_START, PREFILL_END
from kvbench.sim.cluster import LongContextCfg
from kvbench.sim.engine import Engine
from kvbench.sim.job import Job
from kvbench.sim.loop import Loop
from kvbench.sim.rows import EmitRow
from kvbench.sim.spec import LinkSpec, ModelSpec
from kvbench.sim.transfer import SharedLink, send_all, transfer_ns


class SplitView(Protocol):
    """What the split sees of the built cluster (kvbench.sim.build.Cluster)."""

    @property
    def first(self) -> Sequence[Engine]: ...

    @property
    def model(self) -> ModelSpec: ...

    @property
    def kv_bytes(self) -> int: ...

    @property
    def transfer_link(self) -> LinkSpec: ...  # P->D between nodes: also carries context-parallel KV

    def messages(self, tokens: int, block_tokens: int) -> int: ...

    def p2d(self, src: Engine, dst: Engine) -> tuple[SharedLink, str]: ...


class SplitHost(Protocol):
    """What the split calls back into: the event sink and the request lifecycle once the KV has landed."""

    emit: EmitRow

    def decode_landed(self, t: int, job: Job) -> None: ...


class LongContext:
    __slots__ = ("cluster", "loop", "host", "cfg")

    def __init__(self, cluster: SplitView, loop: Loop, host: SplitHost, cfg: LongContextCfg) -> None:
        self.cluster, self.loop, self.host, self.cfg = cluster, loop, host, cfg

    def applies(self, job: Job, first: Engine) -> bool:
        return job.n_in >= self.cfg.threshold_tokens and first.role in ("prefill", "pre_prefill")

    def split(self, t: int, job: Job, first: Engine) -> None:
        cluster, n = self.cluster, self.cfg.instances
        others = sorted(
            (e for e in cluster.first if e is not first and e.role == first.role),
            key=lambda e: (e.queued_tokens, e.index),
        )[: n - 1]
        engines = [first, *others]
        size = job.n_in // len(engines)
        job.engine, job.pending = first, len(engines)
        parts: list[Job] = []  # job.parts is () until split: no list per request
        job.parts = parts
        link = cluster.transfer_link
        for i, e in enumerate(engines):
            start = i * size
            end = job.n_in if i == len(engines) - 1 else start + size
            part = Job(job.req)
            part.parent, part.base, part.ctx, part.prefill_left = job, start, start, end - start
            parts.append(part)
            if not start:
                e.enqueue(part, t)
                continue
            if self.cfg.mode == "context_parallel":
                delay = transfer_ns(link, start * cluster.kv_bytes, cluster.messages(start, e.block_tokens))
            else:
                delay = transfer_ns(link, (end - start) * cluster.model.hidden * 2, 1)
            part.engine = e
            self.loop.at(t + delay, self._start_part, part)

    def _start_part(self, t: int, part: Job) -> None:
        part.engine.enqueue(part, t)

    def part_done(self, e: Engine, part: Job, t: int) -> None:
        e.handoff(part)
        job = part.parent
        assert job is not None  # part jobs have a parent
        job.pending -= 1
        if job.pending:
            return
        self.host.emit(
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
        cluster, dst, sends = self.cluster, job.decode, []
        for part in job.parts:
            src, tokens = part.engine, part.ctx - part.base
            sends.append(
                (cluster.p2d(src, dst)[0], tokens * cluster.kv_bytes, cluster.messages(tokens, src.block_tokens))
            )
        nbytes = sum(b for _, b, _ in sends)
        name = cluster.transfer_link.name
        self.host.emit(
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
        send_all(self.loop, t, sends, self._landed, job)

    def _landed(self, t: int, job: Job) -> None:
        for part in job.parts:
            part.engine.release(part, t)
        nbytes = job.n_in * self.cluster.kv_bytes
        row = (t, job.rid, KV_XFER_END, job.decode.name, job.n_in, None, self.cluster.transfer_link.name, nbytes, None)
        self.host.emit(row)
        job.parts = []
        self.host.decode_landed(t, job)
