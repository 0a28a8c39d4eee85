"""The cyclic GC's young-generation threshold raised for a stretch of work whose new objects are not garbage."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fewer_collections(threshold: int) -> Iterator[None]:
    """Collect the young generation once per `threshold` net allocations instead of CPython's 700 while the block
    runs; the caller's threshold comes back afterwards. A threshold set higher (or 0, off) by the caller is kept."""
    old = gc.get_threshold()
    if 0 < old[0] < threshold:
        gc.set_threshold(threshold, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
