"""cli.startup.unscanned_imports: few young-generation collections while importing, then everything alive frozen."""

from __future__ import annotations

import gc

from kvbench.cli.startup import IMPORT_GC_THRESHOLD, unscanned_imports


def test_imports_run_with_a_raised_threshold_then_what_they_made_is_frozen():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with unscanned_imports():
            inside = gc.get_threshold()
            made = [[i] for i in range(1000)]  # 1,000 tracked lists: as a module's objects would be
        assert inside == (IMPORT_GC_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        assert gc.get_freeze_count() >= len(made)
        in_generations = {id(o) for o in gc.get_objects()}  # the frozen are in none of the three
        assert all(gc.is_tracked(x) and id(x) not in in_generations for x in made)
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_a_caller_threshold_that_is_higher_or_off_is_kept():
    saved = gc.get_threshold()
    try:
        for first in (0, 10 * IMPORT_GC_THRESHOLD):
            gc.set_threshold(first, 10, 10)
            with unscanned_imports():
                assert gc.get_threshold() == (first, 10, 10)
            assert gc.get_threshold() == (first, 10, 10)
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
