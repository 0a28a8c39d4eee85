"""The planner's parts, with hand-computed values: candidates per rung, the deployments a search space expands to,
pruning (model too large, SLO out of reach when idle), Pareto fronts, and a profile written back as TOML."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kvbench.analysis.slo import parse_slo
from kvbench.config import ConfigError
from kvbench.plan.candidates import enumerate_candidates, profile, prune
from kvbench.plan.halving import counts
from kvbench.plan.pareto import front, mark_fronts
from kvbench.plan.planspec import load_plan
from kvbench.plan.preset import to_toml
from kvbench.records import Request
from kvbench.sim.cluster import parse_cluster


def _spec(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text('trace = "t.jsonl"\n' + body)
    return p


def test_candidates_per_rung_halve_down_to_the_final_few() -> None:
    assert counts(10, 3, 0.5, 3) == [10, 5, 3]
    assert counts(20, 4, 0.5, 2) == [20, 10, 5, 2]
    assert counts(4, 3, 0.5, 3) == [4, 3, 3]  # never below `final` before the last rung
    assert counts(2, 3, 0.5, 3) == [2, 2, 2]  # nor more than the rung before
    assert counts(7, 1, 0.5, 3) == [7]


def test_search_space_expands_to_every_fitting_layout(tmp_path: Path) -> None:
    spec = load_plan(
        _spec(tmp_path, 'gpu_budget = 4\n[search]\ntp = [1, 2]\nrouters = ["least_loaded", "cache_aware"]\n')
    )
    cands = enumerate_candidates(spec)
    # colocated: 4 x tp1, 2 x tp2. PD (x prefill x tp_p + y decode x tp_d = 4): tp 1/1: 1p3d 2p2d 3p1d; tp 1/2:
    # 2p1d; tp 2/1: 1p2d; tp 2/2: 1p1d. Six shapes in all, two routers each.
    shapes = sorted({c.name.rsplit("-", 2)[0] for c in cands})
    assert shapes == sorted(
        [
            "colocated-4xtp1-H100",
            "colocated-2xtp2-H100",
            "1p3d-tp1.1-H100.H100",
            "2p2d-tp1.1-H100.H100",
            "3p1d-tp1.1-H100.H100",
            "2p1d-tp1.2-H100.H100",
            "1p2d-tp2.1-H100.H100",
            "1p1d-tp2.2-H100.H100",
        ]
    )
    assert len(cands) == 16 and all(c.gpus == 4 for c in cands)


def test_profile_is_a_valid_sim_profile_with_the_candidates_tiers(tmp_path: Path) -> None:
    spec = load_plan(_spec(tmp_path, '[search]\nlayouts = ["pd"]\ntiers = ["pool"]\ngpus = [2]\n'))
    (cand,) = enumerate_candidates(spec)
    cfg = parse_cluster(profile(spec, cand), "")
    assert [(p.role, p.instances, p.tp) for p in cfg.pools] == [("prefill", 1, 1), ("decode", 1, 1)]
    assert [(t.kind, t.capacity_tokens) for t in cfg.tiers] == [("dram", 3_000_000), ("pool", 50_000_000)]
    assert cfg.router == "least_loaded" and cfg.layout == "pd"


def _requests(n: int, isl: int) -> list[Request]:
    return [Request(k, k * 1_000_000, isl, 10, hash_ids=(k,)) for k in range(n)]


def test_prune_drops_what_cannot_fit_or_meet_the_slo(tmp_path: Path) -> None:
    big = load_plan(_spec(tmp_path, 'model = "Llama-3-70B"\n[search]\nlayouts = ["colocated"]\ngpus = [1]\n'))
    (cand,) = enumerate_candidates(big)  # 70B params x 2 bytes = 140 GB of weights on one 80 GB H100
    why = prune(big, cand, profile(big, cand), _requests(10, 100), parse_slo("ttft=2000"))
    assert why.startswith("does not fit")
    small = load_plan(_spec(tmp_path, '[search]\nlayouts = ["colocated"]\ngpus = [1]\n'))
    (cand,) = enumerate_candidates(small)
    params = profile(small, cand)
    # An 8B model prefills 100k uncached tokens in far more than 1 ms: every request misses TTFT even idle.
    assert prune(small, cand, params, _requests(10, 100_000), parse_slo("ttft=1")).startswith("SLO unreachable")
    assert prune(small, cand, params, _requests(10, 100), parse_slo("ttft=2000,tpot=100")) == ""


def test_pareto_front_keeps_the_undominated() -> None:
    # (goodput/GPU, TTFT p90 lower is better): (1, 100) and (3, 300) and (2, 150) trade off; (1, 200) is beaten by
    # (1, 100); (2, 400) by (3, 300); a missing figure is never on the front.
    xs = [1.0, 3.0, 2.0, 1.0, 2.0, None]
    ys = [100.0, 300.0, 150.0, 200.0, 400.0, 50.0]
    assert front(xs, ys, y_higher=False) == [True, True, True, False, False, False]
    assert front([1.0, 2.0], [5.0, 5.0], y_higher=True) == [False, True]
    rows = [
        {"rung": 0, "status": "complete", "goodput_per_gpu": 1.0, "ttft_ms.p90": 10.0, "user_tokens_per_s": 50.0},
        {"rung": 0, "status": "complete", "goodput_per_gpu": 2.0, "ttft_ms.p90": 20.0, "user_tokens_per_s": 40.0},
        {"rung": 1, "status": "complete", "goodput_per_gpu": 0.5, "ttft_ms.p90": 30.0, "user_tokens_per_s": 10.0},
    ]
    mark_fronts(rows)  # fronts within a rung: the rung-1 row is alone on its own
    assert [(r["pareto_ttft"], r["pareto_user"]) for r in rows] == [(True, True), (True, True), (True, True)]


def test_preset_toml_reads_back_equal() -> None:
    params = {
        "kind": "sim",
        "model": "Llama-3.1-8B",
        "prefix_caching": True,
        "engine": {"token_budget": 8192},
        "pools": {"prefill": {"role": "prefill", "instances": 2, "gpu": "H100", "tp": 1}},
        "router": {"name": "cache_aware"},
        "tiers": {"dram": {"capacity_tokens": "3M", "link": "pcie5"}},
        "spec_decode": {"acceptance": [0.8, 0.6], "k": 2},
        "description": 'a "quoted" name',
    }
    text = to_toml(params, "header line")
    assert text.startswith("# header line\n") and tomllib.loads(text) == params


def test_bad_spec_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"gpus.*gpu_budget = 8"):
        load_plan(_spec(tmp_path, "[search]\ngpus = [16]\n"))
    with pytest.raises(ConfigError, match="halving.requests"):
        load_plan(_spec(tmp_path, "[halving]\nrequests = [800, 200]\n"))
    with pytest.raises(ConfigError, match="layouts"):
        load_plan(_spec(tmp_path, '[search]\nlayouts = ["ring"]\n'))
