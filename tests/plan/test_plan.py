"""`kvbench plan` end to end on the simulator: successive halving over two prefixes of the Kimi-like sample, the
ranking and fronts, the chosen deployment as a preset that --target takes, and reruns that reuse finished searches."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.plans import small_plan

from kvbench.plan.halving import run_plan
from kvbench.plan.planspec import load_plan
from kvbench.sim.cluster import parse_cluster
from kvbench.targets import resolve

SPEC = small_plan('tiers = ["hbm", "dram"]')


def _plan(tmp_path: Path, spec: str = SPEC):
    p = tmp_path / "plan.toml"
    p.write_text(spec)
    return load_plan(p)


def _stamps(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out / "rungs")): p.stat().st_mtime_ns for p in (out / "rungs").rglob("rung.json")}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan")
    spec = _plan(tmp)
    return spec, tmp / "out", run_plan(spec, tmp / "out", workers=1)


def test_plan_halves_ranks_and_writes_a_usable_preset(planned) -> None:
    spec, out, result = planned
    # 2 GPUs: colocated 2 x tp1 and 1p1d, each with HBM only or + DRAM: 4 candidates, 1 kept for the last rung.
    rungs = pd.read_parquet(out / "rungs.parquet")
    assert sorted(rungs["requests"]) == [30, 30, 30, 30, 60] and (rungs["status"] == "complete").all()
    table = pd.read_parquet(out / "plan.parquet")
    assert list(table["rank"]) == [1, 2, 3, 4] and list(table["rung"]) == [1, 0, 0, 0]
    kept = rungs[rungs["requests"] == 60]["candidate"].iloc[0]
    first = rungs[rungs["requests"] == 30]
    best = first[first["goodput_per_gpu"] == first["goodput_per_gpu"].max()]  # the best of the first rung went on
    # ties: more headroom, then the lower TTFT p90, then the name (HBM-only and +DRAM tie when DRAM is never used)
    ties = best.sort_values(["slo_attainment", "ttft_ms.p90", "candidate"], ascending=[False, True, True])
    assert kept == ties["candidate"].iloc[0]
    assert result.best is not None and result.best["candidate"] == kept == table["candidate"].iloc[0]
    assert (table["goodput_per_gpu"] == table["goodput"] / 2).all() and (table["gpus"] == 2).all()
    # the chosen deployment as a preset: --target takes it, and it is the candidate's profile
    chosen = resolve(str(out / "best.toml"))
    cfg = parse_cluster(chosen.params, chosen.source)
    assert sum(p.instances * p.tp for p in cfg.pools) == 2
    assert chosen.params == resolve(str(out / "candidates" / f"{kept}.toml")).params
    # work: probes and simulated requests summed over the searches, in 60-request simulations
    w = json.loads((out / "plan.json").read_text())["work"]
    assert w["probes"] == rungs["probes"].sum() and w["simulated_requests"] == rungs["simulated_requests"].sum()
    assert w["full_simulations"] == pytest.approx(w["simulated_requests"] / 60)
    assert w["exhaustive_full_simulations"] == 4 * rungs[rungs["requests"] == 60]["probes"].iloc[0]
    # every search's curve and its best probe's run are kept under rungs/
    for _, r in rungs.iterrows():
        d = out / "rungs" / f"{r['rung'] + 1}-{r['requests']}" / r["candidate"]
        assert (d / "goodput.json").is_file() and (d / r["probe"] / "run.json").is_file()


def test_rerun_reuses_finished_searches_and_redoes_the_rest(planned, tmp_path: Path) -> None:
    spec, out, result = planned
    before = _stamps(out)
    again = run_plan(spec, out, workers=1)
    assert _stamps(out) == before and again.rows == result.rows
    last = next(k for k in before if k.startswith("2-60/"))
    (out / "rungs" / last).unlink()  # as if the last search had been interrupted
    third = run_plan(spec, out, workers=1)
    after = _stamps(out)
    assert after[last] != before[last] and {k: v for k, v in after.items() if k != last} == {
        k: v for k, v in before.items() if k != last
    }
    assert [r["goodput"] for r in third.rows] == [r["goodput"] for r in result.rows]  # the sim is deterministic


def test_pool_of_two_gives_the_same_plan(planned, tmp_path: Path) -> None:
    spec, out, _ = planned
    run_plan(spec, tmp_path / "pool", workers=2)
    one, two = (pd.read_parquet(d / "plan.parquet") for d in (out, tmp_path / "pool"))
    pd.testing.assert_frame_equal(one, two, check_exact=False, rtol=1e-12)


def test_interrupted_plan_tables_the_searches_that_ended(tmp_path: Path) -> None:
    spec, out = _plan(tmp_path), tmp_path / "out"
    ended: list[int] = []

    def stop_after_two(label: str, c) -> None:
        ended.append(c.done + c.failed)
        if c.done + c.failed == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plan(spec, out, workers=1, show=stop_after_two)
    table = pd.read_parquet(out / "plan.parquet")  # written on the way out, from the two searches that ended
    assert len(table) == 2 and (table["status"] == "complete").all()
    assert not (out / "best.toml").exists() and json.loads((out / "plan.json").read_text())["status"] == "interrupted"
    before = _stamps(out)
    assert len(before) == 2
    run_plan(spec, out, workers=1)  # the rerun reuses both and runs the rest
    assert {k: v for k, v in _stamps(out).items() if k in before} == before and len(_stamps(out)) == 5
