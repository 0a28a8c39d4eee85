"""`kvbench replay` against an endpoint: the exit code says whether the run measured anything."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from support.faultserver import FaultServer, q

KVBENCH = str(Path(sys.executable).parent / "kvbench")


def replay(trace: Path, url: str, out: Path) -> subprocess.CompletedProcess:
    cmd = [KVBENCH, "replay", "--trace", str(trace), "--target", url, "-q", "--out", str(out)]
    cmd += ["--set", "model=fault-model", "--set", "word_tokens=2.0", "--set", "read_timeout_s=2.0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def trace_of(tmp_path: Path, n: int) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": i, "input_length": 64, "output_length": 4}) + "\n" for i in range(n))
    )
    return trace


def test_a_run_in_which_every_request_failed_exits_1_with_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": i, "input_length": 64, "output_length": 4}) + "\n" for i in range(3))
    )
    done = replay(trace, f"http://127.0.0.1:{port}/v1", tmp_path / "r")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"kvbench: error: none of 3 requests finished (3 errors, 0 rejected); 3 like: connect: 127.0.0.1:{port}: "
        "Connection refused"
    ]


def test_a_run_in_which_some_requests_failed_exits_0(tmp_path):
    with FaultServer(fail_every=2) as srv:  # the second request gets a 500
        done = replay(trace_of(tmp_path, 2), srv.base_url, tmp_path / "r")
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    assert q(
        tmp_path / "r", "SELECT kind, count(*) FROM EV WHERE kind IN ('FINISH', 'ERROR') GROUP BY 1 ORDER BY 1"
    ) == [
        ("ERROR", 1),
        ("FINISH", 1),
    ]
