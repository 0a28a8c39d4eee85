"""The event loop: a heap of (t_ns, seq, callback, arg) ordered by time, then by insertion; knows nothing about LLMs."""

from __future__ import annotations

import heapq
from typing import Any, Callable


class Loop:
    """Virtual time advances only by popping the heap; equal times run in the order they were scheduled."""

    __slots__ = ("heap", "seq", "now_ns")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self.seq = 0
        self.now_ns = 0

    def at(self, t_ns: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Run `fn(t_ns, arg)` at virtual time `t_ns` (never earlier than now: causality)."""
        self.seq += 1
        heapq.heappush(self.heap, (t_ns if t_ns > self.now_ns else self.now_ns, self.seq, fn, arg))

    def run(self) -> None:
        """Pop and run events until none is left (callbacks may schedule more)."""
        heap, pop = self.heap, heapq.heappop
        while heap:
            t, _, fn, arg = pop(heap)
            self.now_ns = t
            fn(t, arg)

    def __len__(self) -> int:
        return len(self.heap)
