"""Figure builders on synthetic frames: what they draw is checked on the returned Figure's artists."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvbench.present import plots


def test_fit_transfer_recovers_alpha_and_beta_of_noiseless_transfers() -> None:
    # t = 0.02 ms + bytes / 3.4e8 bytes/ms (340 GB/s, 20 µs): sizes 4 KB .. 4 GB span both regimes.
    nbytes = np.geomspace(4e3, 4e9, 50)
    alpha, beta = plots.fit_transfer(nbytes, 0.02 + nbytes / 3.4e8)
    assert alpha == pytest.approx(0.02, rel=1e-6) and beta == pytest.approx(3.4e8, rel=1e-6)
    # The knee alpha*beta = 6.8 MB: half-bandwidth size, where both terms are 0.02 ms.
    assert alpha * beta == pytest.approx(6.8e6, rel=1e-6)


def test_kv_transfer_figure_is_log_log_with_fit_line_and_knee() -> None:
    nbytes = np.geomspace(4e3, 4e9, 40)
    df = pd.DataFrame({"run": "a", "nbytes": nbytes, "time_ms": 0.02 + nbytes / 3.4e8})
    ax = plots.kv_transfers(df, plots.palette_for(["a"])).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(lbl.startswith("a: α=20 µs, β=340 GB/s") for lbl in labels), labels
    knee = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(knee) == 1 and knee[0].get_xdata()[0] == pytest.approx(6.8e6, rel=1e-6)


def test_latency_cdfs_one_panel_per_metric_one_curve_per_run() -> None:
    rows = [
        {"run": run, "metric": m, "value_ms": v}
        for run in ("base", "cand")
        for m in ("TTFT", "TPOT", "E2E")
        for v in (1.0, 2.0, 3.0, 4.0)
    ]
    fig = plots.latency_cdfs(pd.DataFrame(rows), plots.palette_for(["base", "cand"]))
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["TTFT", "TPOT", "E2E"]
    for a in axes:
        assert len(a.get_lines()) == 2  # one ECDF per run
        # ECDF of 1..4 reaches 1.0 at 4 ms
        assert max(line.get_ydata().max() for line in a.get_lines()) == 1.0
    texts = [t.get_text() for t in axes[-1].get_legend().get_texts()]
    assert texts == ["base", "cand"] and axes[0].get_legend() is None


def test_over_time_draws_one_line_per_run_and_series() -> None:
    t = np.arange(5.0)
    df = pd.concat(
        [pd.DataFrame({"run": r, "t_s": t, "p50": t * k, "p99": t * k + 1}) for k, r in ((1, "a"), (2, "b"))]
    )
    panels = [plots.Panel("TTFT (ms)", {"p50": "p50", "p99": "p99"}), plots.Panel("p50 only", {"p50": "p50"})]
    fig = plots.over_time(df, panels)
    assert len(fig.axes) == 2
    assert len(fig.axes[0].get_lines()) >= 4 and len(fig.axes[1].get_lines()) >= 2  # runs x series (+legend)
    ys = sorted(tuple(line.get_ydata()) for line in fig.axes[1].get_lines() if len(line.get_ydata()) == 5)
    assert ys == [(0, 1, 2, 3, 4), (0, 2, 4, 6, 8)]


def test_heatmap_fills_idle_buckets_and_shares_the_time_axis() -> None:
    # Instance i0 busy in buckets 0, 10, 30 s (20 s missing: idle -> 0 when fill=0); i1 in 0 and 30.
    # Run b lasts 10 s only: its panel still spans run a's 40 s, so equal times line up.
    df = pd.DataFrame(
        {
            "run": ["a"] * 5 + ["b"],
            "instance": ["i0", "i0", "i0", "i1", "i1", "i0"],
            "t_s": [0.0, 10.0, 30.0, 0.0, 30.0, 0.0],
            "utilisation": [0.5, 1.0, 0.25, 0.75, 1.0, 0.5],
        }
    )
    fig = plots.heatmap(df, "utilisation", "utilisation", vmax=1.0, fill=0.0, bucket_s=10.0)
    image = fig.axes[0].images[0]
    values = np.asarray(image.get_array()).reshape(2, 4)  # rows i0, i1; columns 0, 10, 20, 30 s
    assert values.tolist() == [[0.5, 1.0, 0.0, 0.25], [0.75, 0.0, 0.0, 1.0]]
    assert image.get_extent()[:2] == [0.0, 40.0]  # cells from 0 to the end of the 30-s bucket
    run_axes = [ax for ax in fig.axes if ax.images and ax.get_ylabel() == "instance"]
    assert [ax.get_xlim() for ax in run_axes] == [(0.0, 40.0), (0.0, 40.0)]


def test_rebucket_caps_columns() -> None:
    pivot = pd.DataFrame([np.arange(1000.0)], columns=np.arange(1000.0))
    coarse = plots._rebucket(pivot)
    # ceil(1000 / 240) = 5 columns per group -> 200 columns, each the mean of 5 consecutive values
    assert coarse.shape == (1, 200) and coarse.iloc[0, 0] == 2.0 and list(coarse.columns[:2]) == [0.0, 5.0]


def test_attainment_curve_marks_target_and_goodput() -> None:
    df = pd.DataFrame({"run": "g", "rate": [5.0, 10.0, 20.0], "attainment": [1.0, 0.95, 0.1]})
    ax = plots.attainment_curve(df, 0.9, 10.0).axes[0]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert dashed[0].get_ydata()[0] == 0.9 and dotted[0].get_xdata()[0] == 10.0
