"""`kvbench report PLAN_DIR`: a hand-built plan whose tables are computable by hand (ranking with deployments
spelled out and the chosen one starred, pruned reasons, rungs and the work saved, escaping), the figure builders'
data, and a real small plan reported beside one of its probe runs and rendered by headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from support.chromium import dump_dom, screenshot
from support.cli import kvbench
from support.plans import small_plan

from kvbench.plan.halving import run_plan
from kvbench.plan.planspec import load_plan
from kvbench.present.planplots import halving_work, pareto_fronts
from kvbench.present.report import build_report

EVIL = "<script>alert(1)</script>"
A, B, C, D = "colocated-2xtp2-H100-cache_aware-dram", "1p1d-tp1.2-H100.H200-least_loaded-hbm", "c-evil", "d-error"
COLOCATED = {"layout": "colocated", "prefill": None, "decode": None}
SHAPES = {  # settings columns as Candidate.describe() writes them; $/h at H100 $2.5, H200 $3.5
    A: COLOCATED | {"gpus": 4, "replicas": 2, "tp": "2", "gpu_type": "H100", "router": "cache_aware", "tiers": "dram"},
    B: {"layout": "pd", "gpus": 3, "prefill": 1, "decode": 1, "replicas": None, "tp": "1/2"}
    | {"gpu_type": "H100/H200", "router": "least_loaded", "tiers": "hbm"},
    C: COLOCATED | {"gpus": 4, "replicas": 4, "tp": "1", "gpu_type": "H100", "router": EVIL, "tiers": "hbm"},
    D: COLOCATED | {"gpus": 4, "replicas": 4, "tp": "1", "gpu_type": "H100", "router": "least_loaded", "tiers": "hbm"},
}
COST = {A: 10.0, B: 9.5, C: 10.0, D: 10.0}  # A: 4 x 2.5; B: 2.5 + 2 x 3.5


def _row(name: str, rung: int, goodput: float | None, ttft90: float, tpot50: float, probes: int, **flags) -> dict:
    """One search's row: requests 300 on rung 0, 1,500 on rung 1; each probe simulates the whole prefix."""
    n = (300, 1500)[rung]
    gpus = SHAPES[name]["gpus"]
    figures = {
        "goodput": goodput,
        "goodput_per_gpu": goodput / gpus if goodput else None,
        "dollars_per_hour": COST[name],
        "goodput_per_dollar_hour": goodput / COST[name] if goodput else None,
        "ttft_ms.p50": ttft90 / 4,
        "ttft_ms.p90": ttft90,
        "tpot_ms.p50": tpot50,
        "tpot_ms.p90": tpot50 * 1.5,
        "prefix_hit_ratio": 0.25,
        "user_tokens_per_s": 1000 / tpot50,
        "probes": probes,
        "simulated_requests": probes * n,
    }
    status = {"status": "complete"} if goodput else {"status": "error", "error": "RuntimeError: boom"}
    base = {"candidate": name, "rung": rung, "requests": n, **SHAPES[name], **status, **figures}
    return base | {"pareto_user": False, "pareto_ttft": False} | flags


def _rungs() -> list[dict]:
    """Rung 0 (per $/h, user tokens/s, TTFT p90): C (1.2, 40, 500), A (1.0, 50, 600), B (0.632, 100, 250), D failed.
    User front: all three (each has the higher of one figure); TTFT front: C and B (A is beaten by C in both).
    Rung 1: A (0.8, 50, 400) and B (0.632, 100, 300): both on both fronts."""
    both = {"pareto_user": True, "pareto_ttft": True}
    return [
        _row(A, 0, 10.0, 600, 20, 5, pareto_user=True),
        _row(B, 0, 6.0, 250, 10, 5, **both),
        _row(C, 0, 12.0, 500, 25, 4, **both),
        _row(D, 0, None, 0, 1, 0),
        _row(A, 1, 8.0, 400, 20, 6, **both),
        _row(B, 1, 6.0, 300, 10, 6, **both),
    ]


def _hand_plan(out: Path) -> Path:
    rungs = _rungs()
    ranked = [rungs[4] | {"rank": 1}, rungs[5] | {"rank": 2}, rungs[2] | {"rank": 3}, rungs[3] | {"rank": 4}]
    fit = "does not fit: the weights need 160 GB, a GPU holds 80 GB"
    pruned = [{"candidate": f"p{i}", **SHAPES[D], "status": "pruned", "error": fit} for i in range(2)]
    out.mkdir()
    pd.DataFrame(ranked + pruned).to_parquet(out / "plan.parquet", index=False)
    pd.DataFrame(rungs).to_parquet(out / "rungs.parquet", index=False)
    manifest = {
        "name": "hand",
        "model": "Llama-3.1-8B",
        "gpu_budget": 4,
        "slo": "ttft=2000,tpot=50",
        "attainment": 0.9,
        "halving": {"requests": [300, 1500], "keep": 0.5, "final": 2},
        "prices": {"H100": 2.5, "H200": 3.5},
        "ranked_by": "goodput_per_dollar_hour",
        "candidates": [A, B, C, D],
        "pruned": 2,
        "status": "complete",
        "best": A,
        # done: rung 1 14 probes x 300 = 4,200 requests, rung 2 12 x 1,500 = 18,000: 22,200 / 1,500 = 14.8
        # exhaustive: 4 live candidates x 6 probes (the mean of the last rung's searches) = 24
        "work": {"full_simulations": 14.8, "exhaustive_full_simulations": 24.0},
    }
    (out / "plan.json").write_text(json.dumps(manifest))
    return out


def _table_rows(md: str, first: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith(f"| {first}")]


def test_markdown_tables_by_hand(tmp_path: Path) -> None:
    md = build_report([_hand_plan(tmp_path / "hand")], "md")
    assert "## Plan hand" in md and "## Successive halving" in md
    assert (
        "Llama-3.1-8B on at most 4 GPUs; SLO ttft ≤ 2000 ms, tpot ≤ 50 ms for 90% of requests; ranked by goodput per "
        "dollar-hour (req/s per $/h) at H100 $2.5, H200 $3.5 per GPU-hour; 4 candidates searched, 2 pruned; "
        "status complete." in md
    )
    head = (
        "| \\# | deployment: pools × TP; GPU, router, cache tiers | fronts | rung | req/s per $/h | $/h | req/s/GPU |"
    )
    assert head in md
    # A: 8 req/s on 4 GPUs = 2 per GPU, / $10 = 0.8 per $/h; TTFT p50 = 400 / 4; TPOT p90 = 20 x 1.5
    assert _table_rows(md, "1 ★") == [
        "| 1 ★ | 2 × TP2 colocated, H100 · cache\\_aware · HBM + DRAM | user, TTFT | 2 | 0.8 | 10 | 2 | 8 | 4 | 100 "
        "| 400 | 20 | 30 | 0.25 |"
    ]
    # B: 6 req/s on 3 GPUs = 2 per GPU, / $9.5 = 0.6316 per $/h: ties A per GPU, loses per dollar
    assert _table_rows(md, "2 | 1P") == [
        "| 2 | 1P × TP1 + 1D × TP2, P H100, D H200 · least\\_loaded · HBM | user, TTFT | 2 | 0.6316 | 9.5 | 2 | 6 | 3 "
        "| 75 | 300 | 10 | 15 | 0.25 |"
    ]
    assert _table_rows(md, "4 | 4") == [
        "| 4 | 4 × TP1 colocated, H100 · least\\_loaded · HBM | – | 1 | error: RuntimeError: boom |"
    ]
    assert "| does not fit: the weights need 160 GB, a GPU holds 80 GB | 2 |" in md
    assert "★ chosen: colocated-2xtp2-H100-cache\\_aware-dram, written to" in md
    # rung 1: 4 searched (D failed), 2 kept, 5 + 5 + 4 probes x 300 requests = 4,200 = 2.8 x 1,500
    assert _table_rows(md, "1 | 300") == ["| 1 | 300 | 4 | 1 | 2 | 14 | 4,200 | 2.8 |"]
    assert _table_rows(md, "2 | 1,500") == ["| 2 | 1,500 | 2 | 0 | – | 12 | 18,000 | 12.0 |"]
    assert "14.8 full-length simulations (1,500 requests each) in all, against \\~24.0 for an exhaustive" in md
    assert "successive halving did 62% of the work." in md  # 14.8 / 24 = 0.617
    assert EVIL not in md and "&lt;script&gt;" in md


def test_html_page_escapes_and_draws_two_figures(tmp_path: Path) -> None:
    html = build_report([_hand_plan(tmp_path / "hand")], "html")
    assert "<title>kvbench report: plan hand</title>" in html and '<p class="sub">1 plan</p>' in html
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for key in ("plan", "plan-fronts", "plan-rungs"):
        assert f'<section id="{key}">' in html
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/svg\+xml;base64,', html)) == 2
    assert '<span class="chosen">1 ★</span>' in html


def test_a_plan_without_tables_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "plan.json").write_text(json.dumps({"name": "early", "candidates": ["a"], "pruned": 0}))
    done = kvbench("report", str(tmp_path / "early"), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 2 and "has no plan.parquet yet" in done.stderr and done.stderr.count("\n") == 1
    (tmp_path / "early" / "plan.parquet").write_text("not parquet")
    done = kvbench("report", str(tmp_path / "early"), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 2 and "cannot read the plan's tables" in done.stderr, done.stderr


def test_pareto_fronts_draw_every_point_the_front_and_the_chosen_one() -> None:
    done = pd.DataFrame([r for r in _rungs() if r["status"] == "complete"])
    fig = pareto_fronts(done, "goodput_per_dollar_hour", "goodput per dollar-hour (req/s per $/h)", A)
    user0, ttft0, user1, ttft1 = fig.axes
    assert len(user0.collections[0].get_offsets()) == 3 and len(user1.collections[0].get_offsets()) == 2
    line = user0.lines[0]  # the user front by tokens/s: C (40), A (50), B (100)
    assert list(line.get_xdata()) == [40, 50, 100]
    assert list(line.get_ydata()) == pytest.approx([1.2, 1.0, 6 / 9.5])
    assert list(ttft0.lines[0].get_xdata()) == [250, 500]  # B and C; A (600 ms, 1.0) is beaten by C
    assert [tuple(p) for p in user0.collections[1].get_offsets()] == [(50, 1.0)]  # the star: A on rung 1
    assert [tuple(p) for p in ttft1.collections[1].get_offsets()] == [(400, 0.8)]
    for ax in fig.axes:
        assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
    assert user0.get_ylabel() == "goodput per dollar-hour (req/s per $/h)"
    assert "(tokens/s" in user0.get_xlabel() and ttft0.get_xlabel() == "TTFT p90 at goodput (ms)"
    assert user0.get_title(loc="left") == "rung 1: 3 candidates on 300 requests"


def test_halving_work_bars_by_hand() -> None:
    rows = [
        {"rung": 1, "requests": 300, "searched": 4, "full_simulations": 2.8},
        {"rung": 2, "requests": 1500, "searched": 2, "full_simulations": 12.0},
    ]
    left, right = halving_work(rows, 24.0).axes
    assert [p.get_height() for p in left.patches] == [4, 2]
    assert [p.get_height() for p in right.patches] == pytest.approx([2.8, 12.0, 24.0])
    assert [t.get_text() for t in right.get_xticklabels()] == [
        "rung 1\n300 req",
        "rung 2\n1,500 req",
        "exhaustive\n(estimate)",
    ]
    assert right.get_title() == "Work: 14.8 in all" and left.get_ylim()[0] == 0


def test_real_plan_beside_its_probe_run_renders_in_chromium(tmp_path: Path) -> None:
    """2 GPUs: colocated 2 x TP1 and 1P1D; the better goes on to 60 requests and is chosen."""
    (tmp_path / "plan.toml").write_text(small_plan())
    out = tmp_path / "plan"
    result = run_plan(load_plan(tmp_path / "plan.toml"), out, workers=1)
    best = result.best
    assert best is not None
    probe = out / "rungs" / "2-60" / best["candidate"] / best["probe"]
    page = tmp_path / "report.html"
    done = kvbench("report", str(out), str(probe), "-o", str(page))
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert 'id="plan"' in html and 'id="summary"' in html  # the plan's parts, then the run's
    md = kvbench("report", str(out), "-f", "md", "-o", "-").stdout
    chosen = "2 × TP1 colocated" if best["layout"] == "colocated" else "1P × TP1 + 1D × TP1"
    assert _table_rows(md, "1 ★")[0].startswith(f"| 1 ★ | {chosen}, H100 · least\\_loaded · HBM | ")
    # rung 1: both searched on 30 requests, one kept; rung 2: the kept one on 60
    assert _table_rows(md, "1 | 30")[0].startswith("| 1 | 30 | 2 | 0 | 1 | ")
    assert _table_rows(md, "2 | 60")[0].startswith(f"| 2 | 60 | 1 | 0 | – | {best['probes']} | ")
    dom = dump_dom(page, tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
    for key, title in (("plan-front", "Pareto fronts per rung"), ("plan-work", "Candidates and work per rung")):
        assert re.search(f'<figure id="{key}"><h3>{title}</h3><img alt="{title}" src="data:image/svg', dom.stdout)
    shot = screenshot(page, tmp_path / "profile", tmp_path / "shot.png")
    assert shot.stat().st_size > 50_000  # a page of tables and figures, not a blank one
