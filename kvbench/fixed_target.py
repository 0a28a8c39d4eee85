"""A virtual-time target with fixed TTFT/ITL behind N FIFO servers: a queue whose numbers are computed by hand.

Used by tests and by users to check a pipeline (replay, metrics, gates, goodput search) without a cluster model.
`--target fixed:ttft_ms=50,itl_ms=10,servers=4[,fail_every=N]`; servers=0 means unlimited (no queueing).
"""

from __future__ import annotations

import heapq

from kvbench.config import ConfigError, check_keys
from kvbench.records import ARRIVE, CANCEL, ERROR, FINISH, FIRST_TOKEN, LAST_TOKEN, SEND, Emit, Event, Request
from kvbench.target import RunContext, TargetSpec
from kvbench.units import ms_to_ns

_KEYS = ("kind", "ttft_ms", "itl_ms", "servers", "fail_every")


class FixedTarget:
    def __init__(self, spec: TargetSpec, ctx: RunContext):
        p = spec.params
        check_keys(p, _KEYS, spec.source, "", "fixed")
        for key in ("ttft_ms", "itl_ms", "servers", "fail_every"):
            value = p.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{spec.source}: fixed.{key} must be a non-negative number, got {value!r}")
        self.ttft_ns = ms_to_ns(p.get("ttft_ms", 50.0))
        self.itl_ns = ms_to_ns(p.get("itl_ms", 10.0))
        self.servers = int(p.get("servers", 0))
        self.fail_every = int(p.get("fail_every", 0))
        self._heap: list[tuple[int, int, int, Request]] = []  # (t_ns, seq, phase 0=release 1=complete 2=fail, req)
        self._seq = 0
        self._free: list[int] = [0] * self.servers  # when each server is next idle
        self._released = 0
        self._open: dict[int, int] = {}  # req_id -> release time, until its terminal event

    def submit(self, req: Request, at_ns: int) -> None:
        self._open[req.req_id] = at_ns
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
                    del self._open[req.req_id]
                    emit(Event(t, req.req_id, ERROR, instance="fixed", detail="server_error: injected (fail_every)"))
        except KeyboardInterrupt:
            heap.clear()
            for req_id in sorted(self._open):  # released or not, everything submitted and not ended
                emit(Event(max(self._open[req_id], t), req_id, CANCEL, detail="interrupted"))
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
        del self._open[req.req_id]
        emit(Event(t, req.req_id, FINISH, instance="fixed", tokens=req.output_tokens, cached_tokens=0))
