"""Run the `kvbench` command line in a fresh interpreter, as a user's shell would."""

from __future__ import annotations

import subprocess
import sys

# A hang guard, not a speed limit: a small plan's goodput searches took over 120 s on a shared machine at load 10+.
HANG_S = 600


def kvbench(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=HANG_S,
    )
