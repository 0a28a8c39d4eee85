"""The replay progress bar: total, percent, ETA, done/failed, in flight (sent, not ended), live TTFT/TPOT p50."""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvbench.records import ARRIVE, FINISH, FIRST_TOKEN, LAST_TOKEN, TERMINAL, Event
from kvbench.replayer import ReplayStats
from kvbench.units import ns_to_ms, ns_to_s

LIVE_WINDOW = 1000  # the live p50s are over the latest this many requests


class LiveLatency:
    """TTFT (first token - intended arrival) and TPOT ((last token - first token) / (tokens - 1)) of the latest
    requests, from the events as they are logged: the figures per_request.sql computes after the run."""

    __slots__ = ("_arrive", "_first", "_last", "ttft_ns", "tpot_ns")

    def __init__(self) -> None:
        self._arrive: dict[int, int] = {}
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self.ttft_ns: deque[int] = deque(maxlen=LIVE_WINDOW)
        self.tpot_ns: deque[float] = deque(maxlen=LIVE_WINDOW)

    def observe(self, ev: Event) -> None:
        t, rid, kind = ev[0], ev[1], ev[2]
        if kind == ARRIVE:
            self._arrive[rid] = t
        elif kind == FIRST_TOKEN:
            self._first[rid] = t
            at = self._arrive.get(rid)
            if at is not None:
                self.ttft_ns.append(t - at)
        elif kind == LAST_TOKEN:
            self._last[rid] = t
        elif kind in TERMINAL:
            self._arrive.pop(rid, None)
            first, last = self._first.pop(rid, None), self._last.pop(rid, None)
            tokens = ev[4]
            if kind == FINISH and first is not None and last is not None and tokens is not None and tokens >= 2:
                self.tpot_ns.append((last - first) / (tokens - 1))

    def text(self) -> str:
        ttft = f"{ns_to_ms(statistics.median(self.ttft_ns)):,.0f}" if self.ttft_ns else "–"
        tpot = f"{ns_to_ms(statistics.median(self.tpot_ns)):,.1f}" if self.tpot_ns else "–"
        return f"TTFT p50 {ttft} ms  TPOT p50 {tpot} ms"


def describe(st: ReplayStats, live: LiveLatency) -> str:
    failed = st.errors + st.rejected + st.cancelled
    return f"in flight {st.in_flight:,}  failed {failed:,}  {live.text()}  t={ns_to_s(st.last_t_ns):,.1f}s"


def count_later(requests: Callable[[], Iterator[Any]], done: Callable[[int], None]) -> None:
    """Count the workload's requests in a daemon thread (a trace is read once more) and hand the total over."""

    def count() -> None:
        done(sum(1 for _ in requests()))

    threading.Thread(target=count, daemon=True, name="kvbench-count").start()


def progress_bar(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
