"""Fidelity (sim vs real) figures and the calibration fit, on runs and samples whose values are computed by hand."""

from __future__ import annotations

import pytest

from kvbench.analysis.fidelity import compare, rel_error
from kvbench.plan.calibrate import Measured, fit, fit_prefill
from kvbench.present.fidelity import render_html, table_text
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.stream import Workload

# 10 requests one second apart, 11 output tokens each: TTFT = ttft_ms, TPOT = ITL = itl_ms, E2E = ttft + 10 itl.
REQS = [Request(i, i * 1_000_000_000, 100, 11, (i,)) for i in range(10)]


def _run(tmp_path, name: str, target: str):
    wl = Workload("ten", "test", "ten", lambda: iter(REQS))
    run_dir, stats = execute(wl, resolve(target), RunOptions(out=tmp_path / name))
    assert stats.finished == 10
    return run_dir


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fidelity")
    sim = _run(tmp, "sim", "fixed:ttft_ms=60,itl_ms=12")
    real = _run(tmp, "real", "fixed:ttft_ms=50,itl_ms=10")
    return compare(sim, real)


def test_every_latency_statistic_is_20_percent_high(result):
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        for stat in ("p50", "p90", "p99"):
            assert result.error(key, stat) == pytest.approx(0.2), (key, stat)
    row = next(r for r in result.rows if r["key"] == "e2e_ms" and r["stat"] == "p50")
    assert (row["sim"], row["real"]) == (pytest.approx(180.0), pytest.approx(150.0))  # 60 + 10*12, 50 + 10*10
    assert result.worst("p99") == pytest.approx(0.2)


def test_throughput_error_follows_the_run_span(result):
    # duration = last FINISH - first ARRIVE = 9 s + E2E: 9.18 s (sim) and 9.15 s (real), 10 requests each.
    assert result.error("request_throughput") == pytest.approx(9.15 / 9.18 - 1)
    assert result.error("prefix_hit_ratio") is None  # the fixed target reports no cached tokens


def test_request_pairs_and_rendering(result):
    assert list(result.pairs["req_id"]) == list(range(10))
    assert result.pairs["ttft_ms_sim"].tolist() == pytest.approx([60.0] * 10)
    assert result.pairs["e2e_ms_real"].tolist() == pytest.approx([150.0] * 10)
    text = table_text(result)
    assert "TTFT p50 (ms)" in text and "+20.0 %" in text and "10 requests in both" in text
    page = render_html(result)
    assert page.count("data:image/png;base64,") == 2 and "E2E p99 (ms)" in page


def test_rel_error_edge_cases():
    assert rel_error(12.0, 10.0) == pytest.approx(0.2)
    assert rel_error(None, 10.0) is None and rel_error(1.0, 0.0) is None


def test_prefill_fit_recovers_a_quadratic_and_stays_non_negative():
    a, b, c = fit_prefill([(n, 2.0 + 0.01 * n + 1e-5 * n * n) for n in (64, 256, 1024, 2048)])
    assert (a, b, c) == (pytest.approx(2.0), pytest.approx(0.01), pytest.approx(1e-5))
    # Decreasing time per token would need b < 0: the fit drops that term instead (t = a + c n^2 here).
    a, b, c = fit_prefill([(100, 10.0), (200, 10.0), (400, 16.0)])
    assert min(a, b, c) >= 0


def test_fit_rows_and_residuals():
    m = Measured(
        prefill=[(n, 0, 1.0 + 1e-4 * n * n) for n in (100, 200, 400)] + [(100, 1000, 1.0 + 1.0 + 2e-4 * 100_000)],
        decode=[(1, 100, 1.0), (1, 300, 2.0), (2, 200, 3.0)],
    )
    rows, report = fit(m)
    prefill = {(p, c): t for p, c, b, k, t in rows if b == 0}
    assert prefill[(400, 0)] == pytest.approx(17.0) and prefill[(1600, 0)] == pytest.approx(1.0 + 256.0)  # 4x top
    assert prefill[(100, 1000)] == pytest.approx(22.0)  # measured, as the profile's context rows are
    assert [(b, k, t) for p, c, b, k, t in rows if b > 0] == [(1, 100, 1.0), (1, 300, 2.0), (2, 200, 3.0)]
    # excess over the cold fit 20 ms per 100 x 1000 (new x context): 2e-4 ms per token^2
    assert report["prefill_fit_ms"]["context_slope_per_token2"] == pytest.approx(2e-4)
    assert max(abs(r["residual"]) for r in report["prefill"] + report["decode"]) < 1e-6
