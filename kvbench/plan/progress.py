"""What a sweep's progress bar shows: points done (and skipped), running, left and failed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Counts:
    total: int
    done: int = 0  # finished before this run (skipped) or during it
    running: int = 0
    failed: int = 0  # ended without completing (error, failed, interrupted)
    skipped: int = 0

    @property
    def left(self) -> int:
        return self.total - self.done - self.failed - self.running


Progress = Callable[[Counts], None]
