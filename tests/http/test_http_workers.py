"""`--workers N` and the replay CLI against a real endpoint: shards by session, one t0, part files per worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
from support.faultserver import FaultServer

from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.target import TargetSpec
from kvbench.workload.load import Workload

PARAMS = {"kind": "openai"}  # model and word_tokens come from probing the server before t0


def workload() -> Workload:
    # 4 sessions of 3 turns (req 0..11) sharing block 1, then 8 single requests; arrivals 2 ms apart
    reqs = [
        Request(s * 3 + t, (s * 3 + t) * 2_000_000, 48, 3, (1, 10 + s * 3 + t), 32, session_id=s, turn=t)
        for s in range(4)
        for t in range(3)
    ]
    reqs += [Request(i, i * 2_000_000, 48, 3, (1, 50 + i), 32) for i in range(12, 20)]
    reqs.sort(key=lambda r: r.arrival_ns)
    return Workload("w", "mem", "0", lambda: iter(reqs))


def rows(run_dir: Path, sql: str) -> list[tuple]:
    sql = sql.replace("EV", f"read_parquet('{run_dir}/events/*.parquet')")
    return duckdb.connect().execute(sql.replace("RQ", f"read_parquet('{run_dir}/requests/*.parquet')")).fetchall()


def test_two_workers_match_one_process(tmp_path):
    with FaultServer() as srv:
        spec = TargetSpec("openai", "f", {**PARAMS, "base_url": srv.base_url})
        one, st1 = execute(workload(), spec, RunOptions(out=tmp_path / "one"))
        two, st2 = execute(workload(), spec, RunOptions(out=tmp_path / "two", workers=2))
    assert (st1.finished, st2.finished, st2.submitted) == (20, 20, 20)
    # sessions 0, 2 and even singles go to worker 0; sessions 1, 3 and odd singles to worker 1
    assert sorted(p.name for p in (two / "events").iterdir()) == ["w000-00000.parquet", "w001-00000.parquet"]
    # trace-implied reuse is the same as in one process: every request but the first reuses block 1 (32 tokens)
    q = "SELECT req_id, trace_reuse_tokens FROM RQ ORDER BY 1"
    assert rows(two, q) == rows(one, q) == [(0, 0)] + [(i, 32) for i in range(1, 20)]
    # each session's turns run in order within one worker: turn t+1 arrives after turn t finished
    late = rows(
        two,
        """SELECT count(*) FROM EV f JOIN EV a ON a.req_id = f.req_id + 1
                        WHERE f.kind = 'FINISH' AND a.kind = 'ARRIVE' AND f.req_id < 12 AND f.req_id % 3 < 2
                          AND a.t_ns < f.t_ns""",
    )
    assert late == [(0,)]
    manifest = json.loads((two / "run.json").read_text())
    assert manifest["workers"] == 2 and manifest["counts"]["finished"] == 20 and manifest["status"] == "complete"
    params = manifest["target"]["params"]  # probed once, before the fork: 2 tokens a word (see faultserver)
    assert (params["model"], params["word_tokens"]) == ("fault-model", 2.0)
    # the workers' client lags, gathered in the parent, are the log's SEND - ARRIVE of all 20 requests
    ((n, p99_ns),) = rows(
        two,
        """SELECT count(*), quantile_cont(s.t_ns - a.t_ns, 0.99) FROM EV a JOIN EV s
                                USING (req_id) WHERE a.kind = 'ARRIVE' AND s.kind = 'SEND'""",
    )
    assert manifest["client_lag"]["requests"] == n == 20 and manifest["client_lag"]["p99_ms"] == round(p99_ns / 1e6, 3)


def test_cli_replay_against_a_url_with_workers(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * 5, "input_length": 600, "output_length": 4, "hash_ids": [1, 100 + i]}) + "\n"
            for i in range(6)
        )
    )
    with FaultServer() as srv:
        for workers in (1, 2):
            out = tmp_path / f"run{workers}"
            cmd = [
                str(Path(sys.executable).parent / "kvbench"),
                "replay",
                "--trace",
                str(trace),
                "--target",
                srv.base_url,
                "--workers",
                str(workers),
                "-q",
                "--out",
                str(out),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            # calibrated from the server: 2 tokens a word, so 512 + 88 tokens -> 256 + 44 words -> 601 with BOS
            assert rows(out, "SELECT count(*), min(detail), max(detail) FROM EV WHERE kind = 'FINISH'") == [
                (6, "prompt_tokens=601", "prompt_tokens=601")
            ]
