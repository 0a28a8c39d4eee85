"""Benchmark: event-log write rate (events/s), pre-built events and build+write, median of 5 runs.

Events go in as the replayer writes them: `emit` per event, `check()` after each terminal event (FINISH, one
event in three here), which lets the log write a part when its buffer is full.

Run: python tests/bench/bench_eventlog.py [N]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time

from kvbench.eventlog import EventLog
from kvbench.records import ARRIVE, FINISH, FIRST_TOKEN, TERMINAL, Event

KINDS = (ARRIVE, FIRST_TOKEN, FINISH)


def write(events: list[Event]) -> float:
    d = tempfile.mkdtemp()
    try:
        t = time.perf_counter()
        log = EventLog(d)
        emit, check = log.emit, log.check
        for ev in events:
            emit(ev)
            if ev[2] in TERMINAL:
                check()
        log.close()
        return time.perf_counter() - t
    finally:
        shutil.rmtree(d)


def as_event(i: int) -> Event:
    return Event(i * 1000, i >> 2, KINDS[i % 3], "decode-0", 7, 3)


def as_tuple(i: int) -> tuple:
    """As the simulator emits: a plain 9-tuple in Event's field order (no NamedTuple construction)."""
    return (i * 1000, i >> 2, KINDS[i % 3], "decode-0", 7, 3, None, None, None)


def build_and_write(n: int, make) -> float:
    d = tempfile.mkdtemp()
    try:
        t = time.perf_counter()
        log = EventLog(d)
        emit, check = log.emit, log.check
        for i in range(n):
            ev = make(i)
            emit(ev)
            if ev[2] in TERMINAL:
                check()
        log.close()
        return time.perf_counter() - t
    finally:
        shutil.rmtree(d)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    events = [Event(i * 1000, i >> 2, KINDS[i % 3], "decode-0", 7, 3) for i in range(n)]
    w = statistics.median(write(events) for _ in range(5))
    b = statistics.median(build_and_write(n, as_event) for _ in range(5))
    print(f"events: {n:,}")
    print(f"write pre-built events: median {w:.3f} s -> {n / w / 1e6:.2f} M events/s")
    p = statistics.median(build_and_write(n, as_tuple) for _ in range(5))
    print(f"build + write events:   median {b:.3f} s -> {n / b / 1e6:.2f} M events/s (Event NamedTuples)")
    print(f"build + write tuples:   median {p:.3f} s -> {n / p / 1e6:.2f} M events/s (plain tuples, as the sim)")


if __name__ == "__main__":
    main()
