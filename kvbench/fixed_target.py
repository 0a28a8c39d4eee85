"""A virtual-time target with fixed TTFT/ITL behind N FIFO servers: a queue whose numbers are computed by hand.

Used by tests and by users to check a pipeline (replay, metrics, gates, goodput search) without a cluster model.
`--target fixed:ttft_ms=50,itl_ms=10,servers=4[,fail_every=N]`; servers=0 means unlimited (no queueing).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Annotated

from kvbench.config import Range, Source, read
from kvbench.records import ARRIVE, CANCEL, ERROR, FINISH, FIRST_TOKEN, LAST_TOKEN, SEND, Emit, Event, Request
from kvbench.target import RunContext, TargetSpec
from kvbench.units import ms_to_ns


@dataclass(frozen=True)
class FixedOptions:
    ttft_ms: Annotated[float, Range(0)] = 50.0  # release -> first token, when a server is free
    itl_ms: Annotated[float, Range(0)] = 10.0  # between tokens
    servers: Annotated[int, Range(0)] = 0  # FIFO servers; 0 = unlimited
    fail_every: Annotated[int, Range(0)] = 0  # every N-th released request ends in ERROR; 0 = never


class FixedTarget:
    def __init__(self, spec: TargetSpec, ctx: RunContext):
        opts = read(FixedOptions, spec.params, Source.of(spec.source), ignore=("kind",))
        self.ttft_ns = ms_to_ns(opts.ttft_ms)
        self.itl_ns = ms_to_ns(opts.itl_ms)
        self.servers = opts.servers
        self.fail_every = opts.fail_every
        self._heap: list[tuple[int, int, int, Request]] = []  # (t_ns, seq, phase 0=release 1=complete 2=fail, req)
        self._seq = 0
        self._free: list[int] = [0] * self.servers  # when each server is next idle
        self._released = 0
        self._open: set[int] = set()  # req_ids submitted, until their terminal event

    def submit(self, req: Request, at_ns: int) -> None:
        self._open.add(req.req_id)
        self._push(at_ns, 0, req)

    def _push(self, t_ns: int, phase: int, req: Request) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, phase, req))

    def run(self, emit: Emit) -> None:
        heap, t = self._heap, 0
        try:
            while heap:
                t, _, phase, req = heapq.heappop(heap)
                if phase == 0:
                    self._release(t, req, emit)
                elif phase == 1:
                    self._complete(t, req, emit)
                else:
                    self._open.discard(req.req_id)
                    emit(Event(t, req.req_id, ERROR, instance="fixed", detail="server_error: injected (fail_every)"))
        except KeyboardInterrupt:
            heap.clear()
            for req_id in sorted(self._open):  # released or not, everything submitted and not ended, cancelled
                emit(Event(t, req_id, CANCEL, detail="interrupted"))  # now: a request not yet due never arrived
            self._open.clear()
            raise

    def _release(self, t: int, req: Request, emit: Emit) -> None:
        emit(Event(req.arrival_ns, req.req_id, ARRIVE, tokens=req.input_tokens))
        emit(Event(t, req.req_id, SEND))
        self._released += 1
        start = t
        if self.servers:
            start = max(t, heapq.heappop(self._free))
        end = start + self.ttft_ns + self.itl_ns * max(req.output_tokens - 1, 0)
        if self.servers:
            heapq.heappush(self._free, end)
        if self.fail_every and self._released % self.fail_every == 0:
            self._push(start + self.ttft_ns, 2, req)
        else:
            self._push(end, 1, req)

    def _complete(self, t: int, req: Request, emit: Emit) -> None:
        first = t - self.itl_ns * max(req.output_tokens - 1, 0)
        if req.output_tokens > 0:
            emit(Event(first, req.req_id, FIRST_TOKEN, instance="fixed", tokens=1))
            emit(Event(t, req.req_id, LAST_TOKEN, instance="fixed", tokens=req.output_tokens))
        self._open.discard(req.req_id)
        emit(Event(t, req.req_id, FINISH, instance="fixed", tokens=req.output_tokens, cached_tokens=0))
