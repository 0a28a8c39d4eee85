"""`replay --workers N --ray` on a real local Ray cluster (127.0.0.1, 2 CPUs, no dashboard), not a mock: two actors
replay against `kvbench serve` in its own process, release against one t0 and bring their events into the driver's
run directory; Ctrl-C on the driver cancels them and keeps what they logged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from support.cli import kvbench
from support.ray_cluster import local_cluster
from support.serve_proc import served

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.run import RunOptions, load_run
from kvbench.run_ray import execute_on_ray
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000
TERMINAL = "('FINISH', 'ERROR', 'REJECT', 'CANCEL')"


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(num_cpus=2) as address:
        yield address


@pytest.fixture(scope="module")
def server():
    """5 ms to the first token, 5 ms a token; prefix cache in blocks of 16 words (a word is a token here)."""
    with served("--target", "fixed:ttft_ms=5,itl_ms=5") as url:
        yield url


def workload() -> Workload:
    # 12 requests 100 ms apart; request i goes to worker i % 2. All share block 1 (512 tokens), so every request
    # after the first reuses 512 tokens of the one before it, which the other worker sent.
    reqs = [Request(i, i * 100 * MS, 600, 3, (1, 100 + i), 512) for i in range(12)]
    return Workload("w", "mem", "0", lambda: iter(reqs))


def rows(run_dir: Path, sql: str) -> list[tuple]:
    return duckdb.connect().execute(sql.replace("EV", f"read_parquet('{run_dir}/events/*.parquet')")).fetchall()


@pytest.mark.ray
@pytest.mark.parametrize("shared_dir", [True, False], ids=["shared-dir", "object-store"])
def test_two_actors_end_every_request_once_against_one_t0(tmp_path, cluster, server, shared_dir):
    out = tmp_path / "run"
    run_dir, st = execute_on_ray(workload(), resolve(server), RunOptions(out=out, workers=2), "auto", shared_dir)
    assert run_dir == out and (st.status, st.submitted, st.finished) == ("complete", 12, 12)
    # the run directory looks like a local --workers 2 run's: each worker's part files (one a second of the run)
    for table in ("events", "requests"):
        assert {p.name[:5] for p in (out / table).iterdir()} == {"w000-", "w001-"}
    assert rows(out, f"SELECT count(*), count(DISTINCT req_id) FROM EV WHERE kind IN {TERMINAL}") == [(12, 12)]
    assert rows(out, "SELECT count(*) FROM EV WHERE kind = 'FINISH'") == [(12,)]
    # every worker released its requests at their arrival after t0, none early: SEND follows ARRIVE
    assert rows(out, "SELECT min(t_ns), count(*) FROM EV WHERE kind = 'ARRIVE'") == [(0, 12)]
    early = "SELECT count(*) FROM EV a JOIN EV s USING (req_id) WHERE a.kind = 'ARRIVE' AND s.kind = 'SEND'"
    assert rows(out, early + " AND s.t_ns < a.t_ns") == [(0,)]
    # one run, one prompt salt: the server's cache hits across workers, exactly the trace's 512 tokens, for every
    # request but the first the server received (request 0, unless its worker started late on a loaded machine;
    # the server looks up and inserts on arrival). With a salt per worker, each worker's first request would miss.
    cached = rows(out, "SELECT cached_tokens FROM EV WHERE kind = 'FINISH' ORDER BY 1")
    assert cached == [(0,)] + [(512,)] * 11
    m = load_run(out)
    assert (m["status"], m["workers"], m["counts"]["finished"], m["worker_errors"]) == ("complete", 2, 12, [])
    assert m["client_lag"]["requests"] == 12  # gathered from both actors
    workers = m["ray"]["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    assert {w["files"] for w in workers} == {"shared directory" if shared_dir else "object store"}
    for w in workers:
        # One host, one CLOCK_MONOTONIC: the true offset is 0, so the measured one is its error, at most half the
        # fastest round trip (the actor read its clock between the driver's two readings).
        assert w["node_ip"] == "127.0.0.1" and 0 < w["clock_rtt_ns"] < 1_000 * MS
        assert abs(w["clock_offset_ns"]) <= w["clock_rtt_ns"] // 2 + 1
        assert w["start_slack_ns"] > 0  # the actor was ready before t0


@pytest.mark.ray
def test_ctrl_c_on_the_driver_cancels_the_actors_and_keeps_what_they_logged(tmp_path, cluster, server):
    # 100 req/s for 60 s: interrupted once both actors have flushed a part into the shared run directory
    trace = tmp_path / "t.jsonl"
    rows_ = ({"timestamp": 10 * i, "input_length": 32, "output_length": 3, "hash_ids": [i]} for i in range(6000))
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows_))
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "replay", "--trace", str(trace)]
    cmd += ["--target", server, "--out", str(out), "-q", "--workers", "2", "--ray", cluster]
    replay = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and {p.name[:4] for p in (out / "events").glob("*.parquet")} < {
            "w000",
            "w001",
        }:
            time.sleep(0.05)
        os.kill(replay.pid, signal.SIGINT)
        _, err = replay.communicate(timeout=90)
    finally:
        replay.kill()
    assert replay.returncode == 130, err
    m = load_run(out)
    assert (m["status"], m["worker_errors"]) == ("interrupted", [])
    ((arrived, ended, once, cancelled),) = rows(
        out,
        f"""SELECT count(*) FILTER (WHERE kind = 'ARRIVE'), count(*) FILTER (WHERE kind IN {TERMINAL}),
                   count(DISTINCT req_id) FILTER (WHERE kind IN {TERMINAL}), count(*) FILTER (WHERE kind = 'CANCEL')
            FROM EV""",
    )
    # every request ended exactly once: those not yet released with a CANCEL and no ARRIVE
    assert 0 < arrived < ended == once == m["counts"]["submitted"] and cancelled == m["counts"]["cancelled"] > 0
    # both actors stopped at the one interruption, long before the trace's 60 s: request i ran on worker i % 2
    last = rows(out, "SELECT req_id % 2, max(t_ns) FROM EV GROUP BY 1 ORDER BY 1")
    assert [w for w, _ in last] == [0, 1] and abs(last[0][1] - last[1][1]) < 2_000 * MS and last[0][1] < 50_000 * MS


@pytest.mark.ray
def test_more_workers_than_the_cluster_has_cpus_is_refused_before_the_run(tmp_path, cluster, server):
    with pytest.raises(ConfigError, match=r"^--workers 3 needs 3 CPUs on the Ray cluster \(auto\); it has 2$"):
        execute_on_ray(workload(), resolve(server), RunOptions(out=tmp_path / "r", workers=3), "auto")
    assert not (tmp_path / "r").exists()


def test_ray_with_a_sim_target_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"--ray runs the load generators of a real endpoint; target 'pd-2p2d'"):
        execute_on_ray(workload(), resolve("sim"), RunOptions(out=tmp_path / "r", workers=2), "auto")
    assert not (tmp_path / "r").exists()  # refused before anything ran or was written


def test_cli_ray_with_a_sim_target_is_one_line_exit_2(tmp_path):
    trace = Path(__file__).resolve().parents[1] / "traces" / "kimi-sample.jsonl"
    out = tmp_path / "r"
    r = kvbench("replay", "--trace", str(trace), "--target", "sim", "--workers", "2", "--ray", "auto", "-o", str(out))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "--ray runs the load generators of a real endpoint; target 'pd-2p2d' (sim) runs in virtual time" in r.stderr
    assert not out.exists()
