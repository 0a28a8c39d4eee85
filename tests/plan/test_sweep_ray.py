"""`kvbench sweep --ray` on a real local Ray cluster (127.0.0.1, 2 CPUs, no dashboard), not a mock: 8 simulated
points give the same sweep.parquet as the local process pool, and every point's files come back to DIR."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support.ray_cluster import local_cluster

from kvbench.plan.sweep import run_sweep
from kvbench.plan.sweepspec import load_sweep

pytestmark = pytest.mark.ray

TRACE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"
SPEC = f"""trace = "{TRACE}"
target = "sim:pd-2p2d"
max_requests = 200
slo = "ttft=2000,tpot=100"
[axes]
"pools.prefill.instances" = [1, 2]
"pools.decode.instances" = [1, 2]
rate = [4.0, 8.0]
"""


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(num_cpus=2):
        yield


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in (out / "points").rglob("*") if p.is_file())


def test_ray_sweep_equals_local_pool(tmp_path: Path, cluster) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    sweep = load_sweep(spec)
    assert len(sweep.jobs) == 8
    run_sweep(sweep, tmp_path / "pool", workers=2)
    run_sweep(sweep, tmp_path / "ray", ray="auto")  # joins the cluster this process started
    pool, on_ray = (pd.read_parquet(tmp_path / d / "sweep.parquet") for d in ("pool", "ray"))
    same = [c for c in pool.columns if c != "wall_s"]
    assert list(on_ray.columns) == list(pool.columns) and (on_ray["status"] == "complete").all()
    # Same figures; DuckDB's parallel float sums may differ in the last bit from one run to the next.
    pd.testing.assert_frame_equal(pool[same], on_ray[same], check_exact=False, rtol=1e-12)
    assert on_ray["arrival_rate"].nunique() > 1 and (on_ray["requests"] == 200).all()
    assert _files(tmp_path / "ray") == _files(tmp_path / "pool")  # run.json, point.json, events/, ... per point
    again = run_sweep(sweep, tmp_path / "ray", ray="auto")  # resumable on Ray too: nothing left to run
    assert [r["wall_s"] for r in again] == list(on_ray["wall_s"])


def test_ray_plan_equals_local_pool(tmp_path: Path, cluster) -> None:
    """A plan's searches as Ray tasks: the same ranking and figures as on the local pool, every search's files back."""
    from kvbench.plan.halving import run_plan
    from kvbench.plan.planspec import load_plan

    spec = tmp_path / "plan.toml"
    spec.write_text(PLAN)
    p = load_plan(spec)
    run_plan(p, tmp_path / "pool", workers=2)
    run_plan(p, tmp_path / "ray", ray="auto")
    pool, on_ray = (pd.read_parquet(tmp_path / d / "plan.parquet") for d in ("pool", "ray"))
    pd.testing.assert_frame_equal(pool, on_ray, check_exact=False, rtol=1e-12)
    files = [sorted(str(f.relative_to(tmp_path / d)) for f in (tmp_path / d).rglob("*")) for d in ("pool", "ray")]
    assert files[0] == files[1] and (tmp_path / "ray" / "best.toml").is_file()


PLAN = f"""trace = "{TRACE}"
gpu_budget = 2
slo = "ttft=2000,tpot=100"
[search]
layouts = ["colocated", "pd"]
[halving]
requests = [30, 60]
final = 1
precision = 0.5
final_precision = 0.25
"""
