"""`kvbench serve` in its own process for tests and benchmarks: start it on a free port, read its URL."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kvbench.devservers.llamacpp import stop

START_TIMEOUT_S = 20


def start_serve(*args: str) -> tuple[subprocess.Popen, str]:
    """Start `kvbench serve --port 0 ARGS`; returns the process and the base URL it printed (…/v1)."""
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "serve", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    line = ""
    while time.monotonic() < deadline and not line:
        line = proc.stdout.readline().strip()
        if proc.poll() is not None:
            break
    if not line.startswith("http://"):
        stop(proc)
        raise AssertionError(f"kvbench serve did not start: {line!r} {proc.stderr.read()}")
    return proc, line


@contextmanager
def served(*args: str) -> Iterator[str]:
    """`kvbench serve ARGS` for the length of a with-block (a module fixture's life): its base URL; stopped after."""
    proc, url = start_serve(*args)
    try:
        yield url
    finally:
        stop(proc)
