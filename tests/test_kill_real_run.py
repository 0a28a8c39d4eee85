"""A real-endpoint replay killed with SIGKILL mid-run keeps a readable event log that summaries still work on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import duckdb
from support.serve_proc import start_serve

from kvbench.devservers.llamacpp import stop
from kvbench.eventlog import table_glob
from kvbench.run import load_run


def test_sigkill_mid_replay_keeps_what_was_measured(tmp_path):
    # 299 requests, one every 20 ms, 5 output tokens each against a 5 ms TTFT / 5 ms ITL server; the 300th arrives
    # at 600 s, so the kill (at most 30 s in) always lands mid-run however slowly a loaded machine gets there.
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {"timestamp": 20 * i if i < 299 else 600_000, "input_length": 64, "output_length": 5, "hash_ids": [i]}
            )
            + "\n"
            for i in range(300)
        )
    )
    server, url = start_serve("--target", "fixed:ttft_ms=5,itl_ms=5")
    out = tmp_path / "run"
    try:
        replay = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from kvbench.cli.app import main; main()",
                "replay",
                "--trace",
                str(trace),
                "--target",
                url,
                "--out",
                str(out),
                "-q",
            ]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list((out / "events").glob("*.parquet"))) < 2:
            time.sleep(0.1)
        os.kill(replay.pid, signal.SIGKILL)
        replay.wait()
    finally:
        stop(server)
    assert load_run(out)["status"] == "killed"  # run.json was left at "running"
    finished, arrived = (
        duckdb.connect()
        .execute(
            f"SELECT count(*) FILTER (WHERE kind = 'FINISH'), count(*) FILTER (WHERE kind = 'ARRIVE') "
            f"FROM read_parquet('{table_glob(out)}')"
        )
        .fetchone()
    )
    assert 0 < finished <= arrived < 300  # what was flushed before the kill is there, the run did not finish
    r = subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", "summary", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "killed"
