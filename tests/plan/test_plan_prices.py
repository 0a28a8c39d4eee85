"""GPU prices in a plan: the [prices] table checked, a deployment's dollars per hour and goodput per dollar-hour by
hand, the ranking and halving by goodput per dollar-hour when priced (per GPU otherwise), end to end on the sim."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.cli import kvbench
from support.plans import TRACE

from kvbench.config import ConfigError
from kvbench.plan.candidates import Candidate, Pool
from kvbench.plan.pareto import mark_fronts, rank_key
from kvbench.plan.planspec import load_plan
from kvbench.plan.prices import PER_DOLLAR, PER_GPU, add_prices, ranked_by

SPEC = f"""trace = "{TRACE}"
model = "Llama-3.1-8B"
gpu_budget = 1
slo = "ttft=2000,tpot=100"
[search]
layouts = ["colocated"]
gpu_types = ["H100", "H200"]
[halving]
requests = [40]
final = 1
final_precision = 0.25
"""
PRICES = "[prices]\nH100 = 2.0\nH200 = 3.0\n"


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("prices", "needle"),
    [
        ("H100 = 2.0\n", "no price for GPU type 'H200'"),
        ("H100 = 2.0\nH200 = 0\n", "prices.H200 must be a number > 0"),
        ("H100 = 2.0\nH200 = -1.5\n", "prices.H200 must be a number > 0"),
        ("H100 = 2.0\nH200 = 3.0\nH1000 = 1.0\n", "unknown gpu 'H1000'"),
        ('H100 = 2.0\nH200 = "cheap"\n', "prices.H200 must be a number > 0"),
    ],
)
def test_prices_are_checked_at_the_edge(tmp_path: Path, prices: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as e:
        load_plan(_spec(tmp_path, SPEC + "[prices]\n" + prices))
    assert "plan.toml" in str(e.value)


def test_prices_are_optional_and_may_name_more_types(tmp_path: Path) -> None:
    assert load_plan(_spec(tmp_path, SPEC)).file.prices == {}
    spec = load_plan(_spec(tmp_path, SPEC + PRICES + "B200 = 6.0\n"))
    assert spec.file.prices == {"H100": 2.0, "H200": 3.0, "B200": 6.0}
    assert ranked_by(spec.file.prices) == PER_DOLLAR and ranked_by({}) == PER_GPU


def test_dollars_per_hour_sum_every_pools_gpus() -> None:
    # 3 prefill x TP 1 on H100 at $2.5 + 5 decode x TP 2 on H200 at $3.5 = 7.5 + 35 = $42.5 per hour
    pd_cand = Candidate("pd", (Pool("prefill", 3, 1, "H100"), Pool("decode", 5, 2, "H200")), "least_loaded", "hbm")
    assert pd_cand.dollars_per_hour({"H100": 2.5, "H200": 3.5}) == pytest.approx(42.5)
    colocated = Candidate("colocated", (Pool("colocated", 8, 2, "H100"),), "least_loaded", "hbm")
    assert colocated.dollars_per_hour({"H100": 2.5}) == pytest.approx(40.0)  # 16 GPUs x $2.5


def test_add_prices_by_hand() -> None:
    rows = [{"candidate": "a", "goodput": 8.5}, {"candidate": "b", "goodput": None}, {"candidate": "c"}]
    add_prices(rows, {"a": 42.5, "b": 10.0})
    assert rows[0] == {"candidate": "a", "goodput": 8.5, "dollars_per_hour": 42.5, PER_DOLLAR: pytest.approx(0.2)}
    assert rows[1]["dollars_per_hour"] == 10.0 and rows[1][PER_DOLLAR] is None
    assert rows[2] == {"candidate": "c"}  # no cost known: left as it was
    unpriced = [{"candidate": "a", "goodput": 8.5}]
    add_prices(unpriced, {})
    assert unpriced == [{"candidate": "a", "goodput": 8.5}]


def test_a_price_turns_the_ranking_and_the_fronts() -> None:
    # fast: 4 req/s on 2 H200 at $3 = 2 req/s/GPU, 4 / 6 = 0.667 req/s per $/h
    # cheap: 3 req/s on 2 H100 at $2 = 1.5 req/s/GPU, 3 / 4 = 0.75 req/s per $/h
    rows = [
        {"candidate": "fast", "rung": 0, "status": "complete", "goodput": 4.0, PER_GPU: 2.0, "ttft_ms.p90": 100.0},
        {"candidate": "cheap", "rung": 0, "status": "complete", "goodput": 3.0, PER_GPU: 1.5, "ttft_ms.p90": 100.0},
    ]
    add_prices(rows, {"fast": 6.0, "cheap": 4.0})
    assert [r["candidate"] for r in sorted(rows, key=rank_key)] == ["fast", "cheap"]
    assert [r["candidate"] for r in sorted(rows, key=lambda r: rank_key(r, PER_DOLLAR))] == ["cheap", "fast"]
    mark_fronts(rows, PER_DOLLAR)  # same TTFT p90: only the better per dollar is on the front
    assert [r["pareto_ttft"] for r in rows] == [False, True]
    mark_fronts(rows)
    assert [r["pareto_ttft"] for r in rows] == [True, False]


def test_priced_plan_ranks_by_dollars_and_reuses_its_searches_unpriced(tmp_path: Path) -> None:
    """One H100 or one H200 (colocated): priced at $2 and $3 the plan ranks by goodput per dollar-hour; the same
    spec unpriced, into the same DIR, reuses both searches and ranks by goodput per GPU."""
    out = tmp_path / "out"
    done = kvbench("plan", str(_spec(tmp_path, SPEC + PRICES)), "--out", str(out), "-j", "1")
    assert done.returncode == 0, done.stderr
    assert "$/h" in done.stdout and "front of goodput per $/h vs" in " ".join(done.stdout.split())
    priced = pd.read_parquet(out / "plan.parquet")
    cost = priced["gpu_type"].map({"H100": 2.0, "H200": 3.0})
    assert list(priced["dollars_per_hour"]) == list(cost)
    assert list(priced[PER_DOLLAR]) == pytest.approx(list(priced["goodput"] / cost))
    assert list(priced[PER_DOLLAR]) == sorted(priced[PER_DOLLAR], reverse=True) and list(priced["rank"]) == [1, 2]
    manifest = json.loads((out / "plan.json").read_text())
    assert manifest["prices"] == {"H100": 2.0, "H200": 3.0} and manifest["ranked_by"] == PER_DOLLAR
    assert manifest["best"] == priced["candidate"].iloc[0]
    stamps = {p: p.stat().st_mtime_ns for p in (out / "rungs").rglob("rung.json")}

    done = kvbench("plan", str(_spec(tmp_path, SPEC)), "--out", str(out), "-j", "1")
    assert done.returncode == 0, done.stderr
    assert {p: p.stat().st_mtime_ns for p in (out / "rungs").rglob("rung.json")} == stamps  # prices cost no search
    plain = pd.read_parquet(out / "plan.parquet")
    assert "dollars_per_hour" not in plain and PER_DOLLAR not in plain and "$/h" not in done.stdout
    assert list(plain[PER_GPU]) == sorted(plain[PER_GPU], reverse=True)
    by_name = plain.set_index("candidate")["goodput"]
    assert by_name.to_dict() == priced.set_index("candidate")["goodput"].to_dict()
    # with these goodputs the H200 serves more per GPU but less per dollar: the two rankings disagree
    assert list(plain["candidate"]) == list(reversed(list(priced["candidate"])))
    assert json.loads((out / "plan.json").read_text())["ranked_by"] == PER_GPU
