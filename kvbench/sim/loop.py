"""The event loop: events ordered by (t_ns, seq), i.e. by time, then by insertion; knows nothing about LLMs."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any


class Loop:
    """Virtual time advances only by popping events; equal times run in the order they were scheduled.

    Two queues hold the events: a heap, and a FIFO for events scheduled in time order (arrivals: a trace is
    submitted in time order, thousands ahead). Both are sorted by (t_ns, seq) and seq is unique, so taking the
    smaller head of the two is exactly the order of one heap, while the heap stays as small as what is in flight.
    """

    __slots__ = ("heap", "fifo", "seq", "now_ns")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self.fifo: deque[tuple[int, int, Callable[[int, Any], None], Any]] = deque()
        self.seq = 0
        self.now_ns = 0

    def at(self, t_ns: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Run `fn(t_ns, arg)` at virtual time `t_ns` (never earlier than now: causality)."""
        self.seq = seq = self.seq + 1
        now = self.now_ns
        heappush(self.heap, (t_ns if t_ns > now else now, seq, fn, arg))

    def at_in_order(self, t_ns: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Like `at`, cheaper for events scheduled in nondecreasing time (an out-of-order one goes to the heap)."""
        self.seq = seq = self.seq + 1
        t = t_ns if t_ns > self.now_ns else self.now_ns
        fifo = self.fifo
        if fifo and t < fifo[-1][0]:
            heappush(self.heap, (t, seq, fn, arg))
        else:
            fifo.append((t, seq, fn, arg))

    def run(self) -> None:
        """Pop and run events until none is left (callbacks may schedule more)."""
        heap, fifo, pop, popleft = self.heap, self.fifo, heappop, self.fifo.popleft
        while True:
            if fifo:
                t, _, fn, arg = pop(heap) if heap and heap[0] < fifo[0] else popleft()
            elif heap:
                t, _, fn, arg = pop(heap)
            else:
                return
            self.now_ns = t
            fn(t, arg)

    def pending(self) -> list[tuple[int, int, Callable[[int, Any], None], Any]]:
        """Every scheduled event, in no particular order."""
        return [*self.heap, *self.fifo]

    def clear(self) -> None:
        self.heap.clear()
        self.fifo.clear()

    def __len__(self) -> int:
        return len(self.heap) + len(self.fifo)
