"""A simulated run's cyclic-GC threshold (run._virtual_gc): raised while it runs, the caller's restored after."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvbench.records import Event, Request
from kvbench.run import VIRTUAL_GC_THRESHOLD, RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000


def _workload() -> Workload:
    reqs = [Request(i, i * 100 * MS, 10, 3) for i in range(4)]
    return Workload("w", "mem", "0", lambda: iter(reqs))


@contextmanager
def _threshold(first: int) -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(first, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def _thresholds_seen(target: str, out: Path) -> tuple[set[tuple[int, ...]], tuple[int, ...]]:
    """(GC thresholds seen at every event of a run, the threshold after it)."""
    seen: set[tuple[int, ...]] = set()

    def watch(ev: Event) -> None:
        seen.add(gc.get_threshold())

    _, stats = execute(_workload(), resolve(target), RunOptions(out=out), watch=watch)
    assert stats.finished == 4
    return seen, gc.get_threshold()


def test_a_simulated_run_collects_less_often_while_it_runs_and_restores_the_threshold(tmp_path):
    with _threshold(700):
        seen, after = _thresholds_seen("sim", tmp_path / "sim")
    assert seen == {(VIRTUAL_GC_THRESHOLD, 10, 10)} and after == (700, 10, 10)


def test_a_threshold_set_higher_or_off_by_the_caller_is_kept(tmp_path):
    for first in (0, 10 * VIRTUAL_GC_THRESHOLD):
        with _threshold(first):
            seen, after = _thresholds_seen("sim", tmp_path / str(first))
        assert seen == {(first, 10, 10)} and after == (first, 10, 10)
