"""Run the `kvbench` command line in a fresh interpreter, as a user's shell would."""

from __future__ import annotations

import subprocess
import sys


def kvbench(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
