"""`kvbench ... | head`: a reader that closes stdout early makes the real console script exit 0 with a silent stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KVBENCH = str(Path(sys.executable).parent / "kvbench")
REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60  # a hang guard only; each command takes well under a second here


def _run_reader_gone(*args: str) -> subprocess.CompletedProcess:
    """Run kvbench with stdout on a pipe whose read end is closed before kvbench starts: its first write gets EPIPE."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        return subprocess.run(
            [KVBENCH, *args], check=False, stdout=write_fd, stderr=subprocess.PIPE, cwd=REPO, timeout=TIMEOUT_S
        )
    finally:
        os.close(write_fd)


# Three EPIPE paths, each exit 1 or 120 before the fix: --help is printed by rich (Console.on_broken_pipe dup2()s
# /dev/null over stdout, exits 1); trace info by click's echo (typer wraps stdout, exits 1); kv-transfer --json by
# print(), whose buffered 3 kB only fail at the last flush. The sql test below covers a write failing mid-output.
@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("kv-transfer", "--help"),
        ("trace", "info", "traces/kimi-sample.jsonl"),
        ("kv-transfer", "-m", "Llama-3.1-8B", "-n", "8k", "--json"),
    ],
)
def test_reader_gone_before_start_exits_0_quietly(args: tuple[str, ...]) -> None:
    done = _run_reader_gone(*args)
    assert (done.returncode, done.stderr.decode()) == (0, "")


def test_reader_closing_mid_output_exits_0_quietly(tmp_path: Path) -> None:
    # `kvbench sql --csv` of 100,000 rows writes ~588 kB, far more than a pipe holds (64 kB on Linux), so kvbench
    # is still writing (blocked) when we close after reading 100 bytes: its next write fails with EPIPE, like `head`.
    run = tmp_path / "run"
    subprocess.run(
        [
            KVBENCH,
            "replay",
            "--trace",
            "traces/kimi-sample.jsonl",
            "--target",
            "fixed:ttft_ms=1,itl_ms=1,servers=1",
            "-n",
            "2",
            "-o",
            str(run),
            "-q",
        ],
        cwd=REPO,
        check=True,
        timeout=TIMEOUT_S,
    )
    proc = subprocess.Popen(
        [KVBENCH, "sql", str(run), "--csv", "SELECT i FROM range(100000) t(i)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    head = proc.stdout.read(100)
    proc.stdout.close()
    _, err = proc.communicate(timeout=TIMEOUT_S)
    # "i\n" (2 bytes) + "0\n".."9\n" (10 x 2 = 20) + "10\n".."35\n" (26 x 3 = 78) = 100 bytes
    assert head == ("i\n" + "".join(f"{k}\n" for k in range(36))).encode()
    assert (proc.returncode, err.decode()) == (0, "")


def test_bad_input_with_reader_gone_still_exits_2_with_the_error() -> None:
    # EPIPE handling must not swallow other outcomes: a ConfigError is still one line on stderr and exit 2.
    done = _run_reader_gone("sql", "reports/r1")
    assert done.returncode == 2
    assert done.stderr.decode().startswith("kvbench: error: kvbench sql: give RUN... and a query")


def test_usage_error_with_reader_gone_still_exits_2_with_usage() -> None:
    done = _run_reader_gone("--no-such-option")
    assert done.returncode == 2
    assert done.stderr.decode() == "kvbench: error: No such option: --no-such-option (see --help)\n"
