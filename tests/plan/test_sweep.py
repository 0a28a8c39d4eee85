"""Running sweeps on the fixed target, whose figures are computed by hand: one run per point with its parameters
in run.json, sweep.parquet with one row per point, reruns that skip finished points, a bad point that does not end
the sweep, and the same table from the local process pool as from one point at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvbench.eventlog import read_manifest
from kvbench.plan.progress import Counts
from kvbench.plan.sweep import run_sweep
from kvbench.plan.sweepspec import load_sweep

N, GAP_MS = 100, 200  # a constant trace: 100 requests 200 ms apart (5 req/s)


def _spec(tmp_path: Path, axes: str) -> Path:
    trace = tmp_path / "const.jsonl"
    lines = [
        json.dumps({"timestamp": k * GAP_MS, "input_length": 10, "output_length": 6, "hash_ids": []}) for k in range(N)
    ]
    trace.write_text("\n".join(lines) + "\n")
    spec = tmp_path / "sweep.toml"
    spec.write_text(f'trace = "const.jsonl"\ntarget = "fixed:ttft_ms=50,itl_ms=10"\nslo = "ttft=100"\n[axes]\n{axes}')
    return spec


AXES = "servers = [1, 2]\ntime_scale = [1.0, 4.0]\n"
# Service takes 50 + 5 x 10 = 100 ms. Time scale 4: a request every 50 ms; one server queues (request k waits
# k x 50 ms: TTFT_k = 50 + 50 k, so TTFT max 50 + 99 x 50 = 5000 ms and TTFT <= 100 for k <= 1: 2 good of 100);
# two servers take every other request (one each 100 ms): no queue. Time scale 1: never a queue.
TTFT_MAX = {(1, 1.0): 50.0, (1, 4.0): 5000.0, (2, 1.0): 50.0, (2, 4.0): 50.0}
ATTAINMENT = {(1, 1.0): 1.0, (1, 4.0): 0.02, (2, 1.0): 1.0, (2, 4.0): 1.0}


def _key(row) -> tuple[int, float]:
    return int(row["servers"]), float(row["time_scale"])


def test_sweep_runs_every_point_and_tables_them(tmp_path: Path) -> None:
    sweep = load_sweep(_spec(tmp_path, AXES))
    seen: list[Counts] = []
    rows = run_sweep(sweep, tmp_path / "out", workers=1, progress=lambda c: seen.append(Counts(**vars(c))))
    assert [r["status"] for r in rows] == ["complete"] * 4
    df = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert list(df["point"]) == [j.name for j in sweep.jobs] and list(df.columns[:4]) == [
        "point",
        "status",
        "servers",
        "time_scale",
    ]
    for _, row in df.iterrows():
        k = _key(row)
        assert row["ttft_ms.max"] == pytest.approx(TTFT_MAX[k]) and row["slo_attainment"] == pytest.approx(
            ATTAINMENT[k]
        )
        assert row["arrival_rate"] == pytest.approx(5.0 * k[1])  # 99 gaps of 200 ms / scale
        assert row["nominal_rate"] == pytest.approx(5.0 * k[1]) and row["nominal_source"] == "schedule"
        assert row["requests"] == N and row["run_dir"] == f"points/{row['point']}"
        m = read_manifest(tmp_path / "out" / row["run_dir"])
        assert (
            m["sweep"]["params"] == {"servers": k[0], "time_scale": k[1]} and m["target"]["params"]["servers"] == k[0]
        )
    assert (seen[0].done, seen[0].left, seen[-1].done, seen[-1].left, seen[-1].running) == (0, 4, 4, 0, 0)
    assert max(c.running for c in seen) == 1  # one at a time with workers=1


def test_rerun_skips_finished_points_and_reruns_the_rest(tmp_path: Path) -> None:
    spec, out = _spec(tmp_path, AXES), tmp_path / "out"
    first = run_sweep(load_sweep(spec), out, workers=1)
    stamps = {r["point"]: (out / r["run_dir"] / "run.json").stat().st_mtime_ns for r in first}
    (out / first[1]["run_dir"] / "point.json").unlink()  # as if killed before the point was recorded
    seen: list[Counts] = []
    again = run_sweep(load_sweep(spec), out, workers=1, progress=lambda c: seen.append(Counts(**vars(c))))
    assert seen[0].skipped == 3 and seen[-1].done == 4
    after = {r["point"]: (out / r["run_dir"] / "run.json").stat().st_mtime_ns for r in again}
    assert [after[p] == stamps[p] for p in stamps] == [True, False, True, True]
    cols = ["point", "ttft_ms.max", "slo_attainment", "arrival_rate"]
    assert pd.DataFrame(first)[cols].equals(pd.DataFrame(again)[cols])
    # More points later: only the new ones run.
    more = run_sweep(load_sweep(_spec(tmp_path, "servers = [1, 2, 3]\ntime_scale = [1.0, 4.0]\n")), out, workers=1)
    assert len(more) == 6 and all(
        (out / r["run_dir"] / "run.json").stat().st_mtime_ns == after[r["point"]] for r in again
    )


def test_a_bad_point_is_a_row_not_the_end(tmp_path: Path) -> None:
    rows = run_sweep(load_sweep(_spec(tmp_path, "servers = [1, -1]\n")), tmp_path / "out", workers=1)
    assert [r["status"] for r in rows] == ["complete", "error"]
    assert "servers must be a whole number >= 0, got -1" in rows[1]["error"]
    df = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert list(df["status"]) == ["complete", "error"]


def test_local_pool_gives_the_table_of_one_at_a_time(tmp_path: Path) -> None:
    one = run_sweep(load_sweep(_spec(tmp_path, AXES)), tmp_path / "one", workers=1)
    pool = run_sweep(load_sweep(_spec(tmp_path, AXES)), tmp_path / "pool", workers=2)
    keep = [c for c in pd.DataFrame(one).columns if c not in ("wall_s",)]
    pd.testing.assert_frame_equal(pd.DataFrame(one)[keep], pd.DataFrame(pool)[keep], check_exact=False, rtol=1e-12)


def test_out_must_be_new_empty_or_a_sweep(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kvbench.cli.app import main; main()",
            "sweep",
            str(_spec(tmp_path, AXES)),
            "--out",
            str(tmp_path / "busy"),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "not an empty directory or an earlier sweep's" in res.stderr


def test_cli_exit_codes(tmp_path: Path) -> None:
    def run(axes: str, out: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "sweep", str(_spec(tmp_path, axes))]
        return subprocess.run(
            [*cmd, "--out", str(tmp_path / out), "-j", "1"], capture_output=True, text=True, timeout=120
        )

    ok = run("servers = [1]\n", "ok")
    assert ok.returncode == 0 and "achieved req/s" in ok.stdout and "complete" in ok.stdout
    bad = run("servers = [-1]\n", "bad")
    assert bad.returncode == 1 and "servers must be a whole number" in bad.stderr


def test_workload_axis_sets_the_spec_key(tmp_path: Path) -> None:
    spec = tmp_path / "w.toml"
    spec.write_text('workload = "kimi-sample"\ntarget = "fixed:servers=0"\n[axes]\n"workload.requests" = [50, 80]\n')
    rows = run_sweep(load_sweep(spec), tmp_path / "out", workers=1)
    assert [r["requests"] for r in rows] == [50, 80]  # the synthetic spec generates `requests` requests
    digests = {read_manifest(tmp_path / "out" / r["run_dir"])["workload"]["digest"] for r in rows}
    assert len(digests) == 2


def test_points_against_a_real_endpoint_run_one_at_a_time(tmp_path: Path) -> None:
    """`kvbench serve` (fixed timing) on 127.0.0.1 as the endpoint: even with --workers 2 the points do not
    overlap in time, and each finished every request."""
    from datetime import datetime

    from support.serve_proc import start_serve

    from kvbench.devservers.llamacpp import stop

    proc, url = start_serve("--target", "fixed:ttft_ms=20,itl_ms=5,eos_tokens=4")
    try:
        spec = _spec(tmp_path, "concurrency = [1, 2, 4]\n")
        spec.write_text(
            spec.read_text()
            .replace('"fixed:ttft_ms=50,itl_ms=10"', f'"{url}"')
            .replace("[axes]", "max_requests = 20\n[axes]")
        )
        rows = run_sweep(load_sweep(spec), tmp_path / "out", workers=2)
    finally:
        stop(proc)
    assert [(r["status"], r["finished"]) for r in rows] == [("complete", 20)] * 3
    spans = []
    for r in rows:
        m = read_manifest(tmp_path / "out" / r["run_dir"])
        spans.append((datetime.fromisoformat(m["started_at"]), datetime.fromisoformat(m["finished_at"])))
    spans.sort()
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))
