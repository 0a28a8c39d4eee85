"""Figure builders: pure functions DataFrame -> matplotlib Figure (Agg, no pyplot); several runs overlay by colour.

Every builder takes long-format frames with a `run` column and an optional `palette` (run -> colour) so one run
keeps its colour across the report. None of them touches pyplot's global state: figures are built with
`matplotlib.figure.Figure` under `style()`, with fixed margins (a layout engine would draw each figure twice).
"""

from __future__ import annotations

import colorsys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are rendered on CI machines without a display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from kvbench.present import fmt  # noqa: E402

WIDTH_IN = 10.0
PANEL_H_IN = 2.8
LEGEND_IN = 1.9  # right margin that holds the legends, outside the data
MAX_HEATMAP_COLUMNS = 240  # wider heatmaps are re-bucketed: more columns than pixels only blur
LOG_TAIL = 200  # a CDF whose largest value is this many times its smallest is drawn on a log axis
# The colour-blind safe palette (Okabe-Ito derived, as seaborn's "colorblind"); runs past it get evenly spaced hues.
COLOURS = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133", "#56b4e9")
STYLE: dict[str, Any] = {
    "axes.edgecolor": ".8",
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": ".88",
    "axes.labelcolor": ".15",
    "text.color": ".15",
    "xtick.color": ".15",
    "ytick.color": ".15",
    "font.size": 9.5,
    "axes.titlesize": 10,
    "legend.fontsize": "small",
    "legend.frameon": False,
}
DASHES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Panel:
    """One axes of a figure over time: y label and the series it draws (label -> column)."""

    ylabel: str
    series: dict[str, str]
    title: str = ""


def palette_for(runs: list[str]) -> dict[str, tuple[float, float, float]]:
    """Run -> RGB colour, stable in the order given; no two runs share a colour however many there are."""
    out = {}
    for i, run in enumerate(runs):
        if i < len(COLOURS):
            h = COLOURS[i]
            out[run] = tuple(int(h[k : k + 2], 16) / 255 for k in (1, 3, 5))
        else:  # golden-angle hues over two lightness levels: distinct from each other and from the list above
            j = i - len(COLOURS)
            out[run] = colorsys.hls_to_rgb((j * 0.618034 + 0.05) % 1.0, 0.38 + 0.2 * (j % 2), 0.75)
    return out  # type: ignore[return-value]


@contextmanager
def style() -> Iterator[None]:
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        yield


def figure(rows: int, cols: int = 1, height: float = PANEL_H_IN, sharex: bool = True, legend: bool = True):
    """A figure of rows x cols axes with margins fixed in inches (room on the right for legends)."""
    total_h = height * rows
    with style():
        fig = Figure(figsize=(WIDTH_IN, total_h))
        axes = fig.subplots(rows, cols, sharex=sharex, squeeze=False)
    right = 1 - (LEGEND_IN if legend else 0.3) / WIDTH_IN
    fig.subplots_adjust(
        left=0.75 / WIDTH_IN,
        right=right,
        bottom=0.55 / total_h,
        top=1 - 0.35 / total_h,
        hspace=0.35 * PANEL_H_IN / height,  # x labels sit under the bottom panel only
        wspace=0.3,
    )
    return fig, axes


def legend(ax: Axes, entries: list[tuple[str, dict[str, Any]]] | None = None, title: str | None = None) -> None:
    """One compact legend outside the axes: `entries` (label, Line2D style) plus the lines labelled on `ax`."""
    handles: list[Any] = [Line2D([], [], **kw) for _, kw in entries or []]
    labels = [label for label, _ in entries or []]
    for h, label in zip(*ax.get_legend_handles_labels()):
        if label not in labels and not label.startswith("_"):
            handles.append(h)
            labels.append(label)
    if handles:
        ax.legend(
            handles,
            labels,
            title=title,
            title_fontsize="small",
            frameon=False,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )


def run_entries(runs: list[str], palette: dict | None) -> list[tuple[str, dict[str, Any]]]:
    return [(r, {"color": colour(palette, r, i)}) for i, r in enumerate(runs)]


def colour(palette: dict | None, run: Any, i: int) -> Any:
    return palette[run] if palette and run in palette else COLOURS[i % len(COLOURS)]


def tick(value: float, _pos: object = None) -> str:
    return fmt.number(value, fmt.TICK)


def cdf_log_scale(df: pd.DataFrame) -> bool:
    """One scale for every panel of a CDF figure: log when some metric's tail spans over LOG_TAIL x its body."""
    for _, part in df.groupby("metric", sort=False):
        positive = part["value_ms"][part["value_ms"] > 0]
        if len(positive) and positive.max() / max(positive.min(), 1e-9) > LOG_TAIL:
            return True
    return False


def latency_cdfs(df: pd.DataFrame, palette: dict | None = None, log: bool | None = None) -> Figure:
    """CDFs of latency metrics side by side, one scale for all (log or linear from zero, said in the x labels).
    df: run, metric (e.g. TTFT), value_ms (may be quantile samples)."""
    metrics = list(dict.fromkeys(df["metric"]))
    runs = list(dict.fromkeys(df["run"]))
    log = cdf_log_scale(df) if log is None else log
    fig, axes = figure(1, len(metrics), height=3.2, sharex=False)
    for ax, metric in zip(axes[0], metrics):
        part = df[df["metric"] == metric]
        for i, run in enumerate(runs):
            x = np.sort(part.loc[part["run"] == run, "value_ms"].to_numpy(dtype=float))
            if len(x):
                y = np.arange(0, len(x) + 1) / len(x)
                ax.plot(np.r_[x[0], x], y, drawstyle="steps-post", color=colour(palette, run, i), linewidth=1.4)
        if log:
            ax.set_xscale("log")
        else:
            ax.set_xlim(left=0)
        scale = "log scale" if log else "from 0"
        ax.set(title=metric, xlabel=f"{metric} (ms, {scale})", ylabel="fraction of requests", ylim=(0, 1.02))
    legend(axes[0][-1], run_entries(runs, palette), title="run")
    return fig


def over_time(df: pd.DataFrame, panels: list[Panel], palette: dict | None = None, zero: bool = True) -> Figure:
    """Stacked panels sharing the time axis. df: run, t_s and the panels' columns; colour = run, dash = series.
    y axes start at zero (`zero`)."""
    fig, axes = figure(len(panels))
    runs = list(dict.fromkeys(df["run"]))
    for ax, panel in zip(axes[:, 0], panels):
        series = [(label, c) for label, c in panel.series.items() if c in df.columns]
        for i, run in enumerate(runs):
            part = df[df["run"] == run].sort_values("t_s")
            for dash, (_, c) in zip(DASHES, series):
                ax.plot(part["t_s"], part[c], color=colour(palette, run, i), linestyle=dash, linewidth=1.2)
        ax.set(ylabel=panel.ylabel, title=panel.title)
        if zero:
            ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(tick))
        styles = [(label, {"color": "0.2", "linestyle": d}) for d, (label, _) in zip(DASHES, series)]
        legend(ax, run_entries(runs, palette) + (styles if len(series) > 1 else []), title="run")
    axes[-1, 0].set_xlabel("time since run start (s)")  # the panels share it
    return fig


def _rebucket(pivot: pd.DataFrame) -> pd.DataFrame:
    n = pivot.shape[1]
    if n <= MAX_HEATMAP_COLUMNS:
        return pivot
    factor = -(-n // MAX_HEATMAP_COLUMNS)
    groups = np.arange(n) // factor
    coarse = pivot.T.groupby(groups).mean().T
    coarse.columns = [pivot.columns[i * factor] for i in range(coarse.shape[1])]
    return coarse


def _uniform(t: np.ndarray, width: float | None = None) -> np.ndarray:
    """Bucket starts from the first to the last at `width` (default: the smallest spacing seen): idle buckets get
    a column too."""
    if len(t) < 2:
        return t
    width = width or float(np.min(np.diff(t)))
    n = int(round((t[-1] - t[0]) / width)) + 1
    grid = np.round(t[0] + width * np.arange(n), 9)
    return np.union1d(grid, np.round(t, 9)) if n <= 100 * len(t) else t


def heatmap(
    df: pd.DataFrame,
    value: str,
    label: str,
    vmax: float | None = None,
    fill: float | None = None,
    bucket_s: float | None = None,
) -> Figure:
    """Instance x time heatmap, one panel per run, all on one time axis (seconds since each run's start).
    df: run, instance, t_s, `value`. Buckets missing for an instance get `fill` (e.g. 0 utilisation while idle),
    else stay blank (grey)."""
    runs = list(dict.fromkeys(df["run"]))
    n_inst = df.groupby("run")["instance"].nunique().max()
    width = bucket_s or float(np.min(np.diff(np.unique(df["t_s"])), initial=1.0))
    t_end = float(df["t_s"].max()) + width
    fig, axes = figure(len(runs), height=max(1.6, 0.9 + 0.22 * n_inst), sharex=True, legend=False)
    for ax, run in zip(axes[:, 0], runs):
        part = df[df["run"] == run]
        pivot = part.pivot_table(index="instance", columns="t_s", values=value, aggfunc="mean")
        pivot = pivot.reindex(columns=_uniform(pivot.columns.to_numpy(dtype=float), bucket_s))
        pivot = _rebucket(pivot.fillna(fill) if fill is not None else pivot)
        cols = pivot.columns.to_numpy(dtype=float)
        step = float(cols[1] - cols[0]) if len(cols) > 1 else width
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#e6e6e6")  # blank cells: no step ran there
        im = ax.imshow(
            np.ma.masked_invalid(pivot.to_numpy(dtype=float)),
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            vmin=0,
            vmax=vmax,
            extent=(cols[0], cols[-1] + step, len(pivot), 0),
        )
        fig.colorbar(im, ax=ax, label=label, pad=0.01, fraction=0.04)
        ax.set_yticks(np.arange(len(pivot)) + 0.5, [str(i) for i in pivot.index])
        ax.grid(False)
        ax.set(title=run if len(runs) > 1 else "", ylabel="instance")
        ax.set_xlim(0, t_end)
    axes[-1, 0].set_xlabel("time since run start (s)")  # the panels share it
    return fig


def fit_transfer(nbytes: np.ndarray, time_ms: np.ndarray) -> tuple[float, float]:
    """Fit t = alpha + bytes / beta minimising *relative* error (so small transfers weigh as much as large
    ones); returns (alpha_ms, beta_bytes_per_ms), both clamped positive."""
    ok = (time_ms > 0) & (nbytes > 0)
    x, t = nbytes[ok].astype(float), time_ms[ok].astype(float)
    if len(t) < 2:
        return (float(t[0]) if len(t) else 0.0), float("inf")
    a = np.column_stack([1 / t, x / t])  # each row (alpha + slope*x - t) / t
    (alpha, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    alpha = max(float(alpha), float(t.min()) * 1e-3)
    slope = max(float(slope), 1e-12)
    return alpha, 1 / slope


def _knee(ax: Axes, knee: float, colour_: Any, row: int) -> None:
    """The dotted knee line with its two regime labels, one text row per run so runs do not overprint."""
    ax.axvline(knee, color=colour_, linestyle=":", linewidth=1)
    for text, ha in (("← RTT-bound ", "right"), (" bandwidth-bound →", "left")):
        y = 0.97 - 0.06 * row
        ax.annotate(text, (knee, y), xycoords=("data", "axes fraction"), ha=ha, va="top", fontsize="x-small")
        ax.texts[-1].set_color(colour_)


def kv_transfers(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """KV transfer time vs size, log-log, with the fitted alpha + bytes/beta curve per run: left of
    alpha*beta (the half-bandwidth size) transfers are RTT-bound, right of it bandwidth-bound.
    df: run, nbytes, time_ms (a sample is enough)."""
    fig, axes = figure(1, height=4.0, legend=True)
    fig.subplots_adjust(right=1 - 3.0 / WIDTH_IN)  # the fit labels are long
    ax = axes[0][0]
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        c = colour(palette, run, i)
        ax.scatter(part["nbytes"], part["time_ms"], s=10, alpha=0.5, linewidths=0, color=c, label=str(run))
        alpha, beta = fit_transfer(part["nbytes"].to_numpy(), part["time_ms"].to_numpy())
        xs = np.geomspace(max(part["nbytes"].min(), 1), max(part["nbytes"].max(), 2), 100)
        label = f"{run}: α={tick(alpha * 1000)} µs, β={tick(beta / 1e6)} GB/s"  # bytes/ms -> GB/s
        ax.plot(xs, alpha + xs / beta, color=c, linewidth=1.5, label=label)
        knee = alpha * beta  # bytes where the bandwidth term equals the per-transfer latency
        if np.isfinite(knee) and xs[0] / 100 <= knee <= xs[-1] * 100:  # far-off knees would stretch the axis
            _knee(ax, knee, c, i)
    ax.set(xscale="log", yscale="log", xlabel="KV bytes transferred (log scale)", ylabel="transfer time (ms, log)")
    legend(ax)
    return fig


def attainment_curve(
    df: pd.DataFrame, target: float, goodput_rate: float | None, palette: dict | None = None
) -> Figure:
    """SLO attainment vs arrival rate: solid, the rate each probe achieved (arrivals in its log); dash-dotted grey,
    the nominal rate it asked for. df: run (source label), rate (nominal), achieved_rate (optional: older results
    have none, then it is the nominal one), attainment (0..1)."""
    fig, axes = figure(1, height=3.4)
    ax = axes[0][0]
    df = df.assign(achieved_rate=df["achieved_rate"] if "achieved_rate" in df else df["rate"]).sort_values("rate")
    xlabel = "arrival rate, achieved (req/s)"
    if not df["achieved_rate"].equals(df["rate"]):
        ax.plot(df["rate"], df["attainment"], "-.", color="grey", marker="o", fillstyle="none", label="nominal rate")
        xlabel = "arrival rate (req/s): achieved, and nominal (dash-dotted)"
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        ax.plot(part["achieved_rate"], part["attainment"], marker="o", color=colour(palette, run, i), label=str(run))
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {fmt.share(target)}")
    if goodput_rate is not None:
        ax.axvline(
            goodput_rate,
            color="black",
            linestyle=":",
            linewidth=1,
            label=f"goodput {fmt.number(goodput_rate, fmt.BRIEF)} req/s",
        )
    ax.set(xlabel=xlabel, ylabel="SLO attainment", ylim=(-0.02, 1.02))
    ax.set_xlim(left=0)
    legend(ax)
    return fig


def png(fig: Figure, dpi: int = 96) -> str:
    """The figure as a PNG data: URI, for figures of many points or cells (scatters, heatmaps). No version stamp,
    so the same figure gives the same bytes."""
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def svg(fig: Figure) -> str:
    """The figure as an SVG data: URI, for line figures: smaller than their PNG and quicker to write. Element ids
    come from a fixed salt and no date is stamped, so the same figure gives the same bytes. An SVG shown through
    <img> runs no script."""
    import base64
    import io

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "kvbench"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
