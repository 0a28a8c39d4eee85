"""An interrupted run reports true figures: cancellations are stamped at the interruption, and requests it
cancelled before they were sent are left out of the attainment denominator and the time series."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from pytest import approx
from support.serve_proc import start_serve

from kvbench.devservers.llamacpp import stop
from kvbench.eventlog import table_glob
from kvbench.present.summary import build
from kvbench.records import Request
from kvbench.run import RunOptions, execute, load_run
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000


def _stop_at_first_progress():
    """A progress callback that interrupts the run the first time it is called (the replayer's stop path, as a
    Ctrl-C in the middle of a run): the replayer reports every 16 ended requests, so at the 16th."""
    calls = []

    def progress(stats):
        calls.append(stats.ended)
        if len(calls) == 1:
            raise KeyboardInterrupt

    return progress, calls


def test_figures_of_an_interrupted_fixed_run_by_hand(tmp_path):
    # 1,000 requests 10 ms apart (100 req/s), each TTFT 50 ms + 2 gaps of 10 ms = 70 ms, unlimited servers.
    # The 16th end is request 15's FINISH at 150 + 70 = 220 ms; by then requests 0..22 were released (22's
    # release at 220 ms is queued before 15's completion). So: 16 finished, 7 in flight (sent) and 977 not yet
    # due, all cancelled at 220 ms.
    reqs = [Request(i, i * 10 * MS, 10, 3) for i in range(1000)]
    progress, calls = _stop_at_first_progress()
    wl = Workload("w", "mem", "0", lambda: iter(reqs))
    run_dir, stats = execute(wl, resolve("fixed:ttft_ms=50,itl_ms=10"), RunOptions(out=tmp_path / "r"), progress)
    assert calls[0] == 16 and stats.status == "interrupted" and load_run(run_dir)["status"] == "interrupted"
    assert (stats.finished, stats.cancelled) == (16, 984)
    cancels = duckdb.connect().execute(
        f"SELECT min(t_ns), max(t_ns), count(*) FROM read_parquet('{table_glob(run_dir)}') WHERE kind = 'CANCEL'"
    )
    assert cancels.fetchone() == (220 * MS, 220 * MS, 984)
    doc = build(run_dir, bucket_s=0.1)
    m = doc["metrics"]
    assert (m["requests"], m["finished"], m["cancelled"]) == (1000, 16, 984)
    assert m["duration_s"] == approx(0.22)  # first ARRIVE 0 -> the interruption at 220 ms (not 9.99 s)
    assert m["request_throughput"] == approx(16 / 0.22)
    assert m["output_token_throughput"] == approx(16 * 3 / 0.22)
    assert m["slo_attainment"] == approx(16 / 23)  # the 977 never sent are not in the denominator
    assert m["goodput"] == approx(16 / 0.22)
    ts = doc["timeseries"]
    assert ts["t_s"] == approx([0.0, 0.1, 0.2])  # the series ends at the interruption, not at 9.9 s
    assert ts["arrivals"] == [10, 10, 3]  # 0..9, 10..19, 20..22: the sent requests only
    assert doc["samples"]["slo_attainment"]["n"] == 23  # the bootstrap draws from the same denominator


@pytest.mark.parametrize(
    "signum, sigint_ignored", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)]
)
def test_sigint_of_a_real_replay_reports_the_time_it_ran(tmp_path, signum, sigint_ignored):
    # 100 req/s for 60 s against `kvbench serve` (5 ms to the first token, 5 ms a token): interrupted after a few
    # seconds, the run must report those seconds and ~100 req/s, not 60 s and a fraction of it. SIGTERM (a
    # scheduler's stop) is an interruption too, also for a background job started with SIGINT ignored.
    trace = tmp_path / "t.jsonl"
    rows = ({"timestamp": 10 * i, "input_length": 32, "output_length": 3, "hash_ids": [i]} for i in range(6000))
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server, url = start_serve("--target", "fixed:ttft_ms=5,itl_ms=5")
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "replay", "--trace", str(trace)]
    try:
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        args = [*cmd, "--target", url, "--out", str(out), "-q"]
        replay = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, preexec_fn=ignore)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list((out / "events").glob("*.parquet"))) < 3:
            time.sleep(0.05)  # a part a second: the run is ~3 s in
        os.kill(replay.pid, signum)
        _, err = replay.communicate(timeout=60)
    finally:
        stop(server)
    assert replay.returncode == 130, err
    assert load_run(out)["status"] == "interrupted"
    m = build(out)["metrics"]
    last_cancel, first_cancel = (
        duckdb.connect()
        .execute(f"SELECT max(t_ns), min(t_ns) FROM read_parquet('{table_glob(out)}') WHERE kind = 'CANCEL'")
        .fetchone()
    )
    assert last_cancel - first_cancel < 500 * MS  # all stamped at the interruption
    assert 2 < m["duration_s"] < 30 and m["duration_s"] == approx(last_cancel / 1e9, abs=0.05)
    # Throughput is what finished over the seconds it ran: ~100 req/s offered; over 59.99 s it would be ~5. The
    # served rate itself falls on a loaded machine (67 req/s seen), so only a floor far above ~5 is asserted.
    assert m["request_throughput"] == approx(m["finished"] / m["duration_s"])
    assert 20 < m["request_throughput"] < 101
    assert m["slo_attainment"] > 0.95  # the requests sent finished; the thousands never sent are not counted
