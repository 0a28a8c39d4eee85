"""A command's heavy imports without cyclic-GC passes: the objects they make live as long as the process."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from kvbench.gcpolicy import fewer_collections

IMPORT_GC_THRESHOLD = 100_000  # young-generation threshold while importing (CPython's default is 700)


@contextmanager
def unscanned_imports() -> Iterator[None]:
    """Import in the block with the young generation collected rarely (the modules' functions, classes and
    constants are never garbage, so a collection every 700 allocations only rescans them), then freeze every
    object alive so that no later collection (during the run, or the interpreter's at exit) walks them again.
    The caller's threshold comes back afterwards; a higher one, or GC turned off, is left as it is."""
    try:
        with fewer_collections(IMPORT_GC_THRESHOLD):
            yield
    finally:
        gc.freeze()
