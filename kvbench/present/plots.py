"""Figure builders: pure functions DataFrame -> matplotlib Figure (seaborn, Agg); several runs overlay by hue.

Every builder takes long-format frames with a `run` column and an optional `palette` (run -> colour) so one run
keeps its colour across the report. None of them touches pyplot's global state: figures are built with
`matplotlib.figure.Figure` and style is applied through context managers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are rendered on CI machines without a display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from kvbench.present import fmt  # noqa: E402

WIDTH_IN = 10.0
PANEL_H_IN = 2.8
MAX_HEATMAP_COLUMNS = 240  # wider heatmaps are re-bucketed: more columns than pixels only blur


@dataclass(frozen=True)
class Panel:
    """One axes of a figure over time: y label and the series it draws (label -> column)."""

    ylabel: str
    series: dict[str, str]
    title: str = ""


def palette_for(runs: list[str]) -> dict[str, tuple]:
    """Run -> colour, colour-blind safe, stable in the order the runs were given."""
    return dict(zip(runs, sns.color_palette("colorblind", max(len(runs), 1))))


def _figure(rows: int, cols: int = 1, height: float = PANEL_H_IN, sharex: bool = True) -> tuple[Figure, np.ndarray]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        fig = Figure(figsize=(WIDTH_IN, height * rows), layout="constrained")
        axes = fig.subplots(rows, cols, sharex=sharex, squeeze=False)
    return fig, axes


def _legend(ax: Axes) -> None:
    """One compact legend: seaborn's (hue/style entries) merged with lines labelled by the builder."""
    handles: list[Any] = []  # a legend's handles may be None (entries drawn without an artist)
    labels: list[str] = []
    title = None
    leg = ax.get_legend()
    if leg is not None:
        handles, labels = list(leg.legend_handles), [t.get_text() for t in leg.get_texts()]
        title = leg.get_title().get_text() or None
    for h, label in zip(*ax.get_legend_handles_labels()):
        if label not in labels and not label.startswith("_"):
            handles.append(h)
            labels.append(label)
    if handles:
        ax.legend(
            handles,
            labels,
            title=title,
            fontsize="small",
            title_fontsize="small",
            frameon=False,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )  # outside: never hides data


def _tick(value: float, _pos: object = None) -> str:
    return fmt.number(value, fmt.TICK)


def latency_cdfs(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """CDFs of latency metrics side by side. df: run, metric (e.g. TTFT), value_ms (may be quantile samples)."""
    metrics = list(dict.fromkeys(df["metric"]))
    fig, axes = _figure(1, len(metrics), height=3.2, sharex=False)
    for ax, metric in zip(axes[0], metrics):
        part = df[df["metric"] == metric]
        sns.ecdfplot(part, x="value_ms", hue="run", palette=palette, ax=ax)
        positive = part["value_ms"][part["value_ms"] > 0]
        if len(positive) and positive.max() / max(positive.min(), 1e-9) > 200:
            ax.set_xscale("log")  # heavy tails: a linear axis squeezes the body into one pixel column
        ax.set(title=metric, xlabel=f"{metric} (ms)", ylabel="fraction of requests")
        if ax is not axes[0][-1] and ax.get_legend() is not None:
            ax.get_legend().remove()  # one legend per figure, right of the last panel: the runs are the same
    _legend(axes[0][-1])
    return fig


def over_time(df: pd.DataFrame, panels: list[Panel], palette: dict | None = None) -> Figure:
    """Stacked panels sharing the time axis. df: run, t_s and the panels' columns; hue = run, style = series."""
    fig, axes = _figure(len(panels))
    for ax, panel in zip(axes[:, 0], panels):
        cols = [c for c in panel.series.values() if c in df.columns]
        long = df.melt(id_vars=["run", "t_s"], value_vars=cols, var_name="col", value_name="value")
        long["series"] = long["col"].map({c: label for label, c in panel.series.items()})
        style = "series" if len(cols) > 1 else None
        sns.lineplot(
            long,
            x="t_s",
            y="value",
            hue="run",
            style=style,
            palette=palette,
            ax=ax,
            errorbar=None,
            estimator=None,
            linewidth=1.2,
        )
        ax.set(ylabel=panel.ylabel, title=panel.title, xlabel="time since run start (s)")
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
        _legend(ax)
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


def _time_ticks(columns: list[float]) -> tuple[list[float], list[str]]:
    """Tick positions (cell centres) and labels at round times, about ten across the heatmap."""
    t = np.asarray(columns, dtype=float)
    if len(t) < 2:
        return [0.5] * len(t), [fmt.short(v) for v in t]
    raw = (t[-1] - t[0]) / 10
    exp = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next((m * exp for m in (1, 2, 5, 10) if m * exp >= raw), 10 * exp)
    marks = np.arange(math.ceil(t[0] / step) * step, t[-1] + step / 2, step)
    pos = np.searchsorted(t, marks - 1e-9)
    keep = pos < len(t)
    return [float(p) + 0.5 for p in pos[keep]], [fmt.number(m, fmt.MARK) for m in marks[keep]]


def _uniform(t: np.ndarray) -> np.ndarray:
    """Bucket starts from the first to the last at the smallest spacing seen: idle buckets get a column too."""
    if len(t) < 2:
        return t
    width = float(np.min(np.diff(t)))
    n = int(round((t[-1] - t[0]) / width)) + 1
    grid = np.round(t[0] + width * np.arange(n), 9)
    return np.union1d(grid, np.round(t, 9)) if n <= 100 * len(t) else t


def heatmap(df: pd.DataFrame, value: str, label: str, vmax: float | None = None, fill: float | None = None) -> Figure:
    """Instance x time heatmap, one panel per run. df: run, instance, t_s, `value`. Buckets missing for an
    instance get `fill` (e.g. 0 utilisation while idle), else stay blank (grey)."""
    runs = list(dict.fromkeys(df["run"]))
    n_inst = df.groupby("run")["instance"].nunique().max()
    fig, axes = _figure(len(runs), height=max(1.6, 0.9 + 0.22 * n_inst), sharex=False)
    for ax, run in zip(axes[:, 0], runs):
        part = df[df["run"] == run]
        pivot = part.pivot_table(index="instance", columns="t_s", values=value, aggfunc="mean")
        pivot = pivot.reindex(columns=_uniform(pivot.columns.to_numpy(dtype=float)))
        pivot = _rebucket(pivot.fillna(fill) if fill is not None else pivot)
        sns.heatmap(
            pivot,
            ax=ax,
            cmap="viridis",
            vmin=0,
            vmax=vmax,
            cbar_kws={"label": label},
            xticklabels=False,
            yticklabels=True,
        )
        ax.set_facecolor("#e6e6e6")  # blank cells: no step ran there
        pos, labels = _time_ticks(list(pivot.columns))
        ax.set_xticks(pos, labels, rotation=0)
        ax.set(title=run if len(runs) > 1 else "", xlabel="time since run start (s)", ylabel="instance")
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


def kv_transfers(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """KV transfer time vs size, log-log, with the fitted alpha + bytes/beta curve per run: left of
    alpha*beta (the half-bandwidth size) transfers are RTT-bound, right of it bandwidth-bound.
    df: run, nbytes, time_ms (a sample is enough)."""
    fig, axes = _figure(1, height=4.0)
    ax = axes[0][0]
    sns.scatterplot(df, x="nbytes", y="time_ms", hue="run", palette=palette, ax=ax, s=10, alpha=0.5, linewidth=0)
    for run, part in df.groupby("run", sort=False):
        alpha, beta = fit_transfer(part["nbytes"].to_numpy(), part["time_ms"].to_numpy())
        xs = np.geomspace(max(part["nbytes"].min(), 1), max(part["nbytes"].max(), 2), 100)
        colour = palette.get(run) if palette else None
        ax.plot(
            xs,
            alpha + xs / beta,
            color=colour,
            linewidth=1.5,
            label=f"{run}: α={_tick(alpha * 1000)} µs, β={_tick(beta / 1e6)} GB/s",
        )  # bytes/ms -> GB/s
        knee = alpha * beta  # bytes where the bandwidth term equals the per-transfer latency
        if np.isfinite(knee) and xs[0] / 100 <= knee <= xs[-1] * 100:  # far-off knees would stretch the axis
            ax.axvline(knee, color=colour, linestyle=":", linewidth=1)
            for text, ha in (("← RTT-bound ", "right"), (" bandwidth-bound →", "left")):
                ax.annotate(
                    text,
                    (knee, 0.97),
                    xycoords=("data", "axes fraction"),
                    ha=ha,
                    va="top",
                    fontsize="x-small",
                    color=colour or "black",
                )
    ax.set(xscale="log", yscale="log", xlabel="KV bytes transferred", ylabel="transfer time (ms)")
    _legend(ax)
    return fig


def attainment_curve(
    df: pd.DataFrame, target: float, goodput_rate: float | None, palette: dict | None = None
) -> Figure:
    """SLO attainment vs arrival rate: solid, the rate each probe achieved (arrivals in its log); dash-dotted grey,
    the nominal rate it asked for. df: run (source label), rate (nominal), achieved_rate (optional: older results
    have none, then it is the nominal one), attainment (0..1)."""
    fig, axes = _figure(1, height=3.4)
    ax = axes[0][0]
    df = df.assign(achieved_rate=df["achieved_rate"] if "achieved_rate" in df else df["rate"]).sort_values("rate")
    xlabel = "arrival rate, achieved (req/s)"
    if not df["achieved_rate"].equals(df["rate"]):
        ax.plot(df["rate"], df["attainment"], "-.", color="grey", marker="o", fillstyle="none", label="nominal rate")
        xlabel = "arrival rate (req/s): achieved, and nominal (dash-dotted)"
    sns.lineplot(
        df,
        x="achieved_rate",
        y="attainment",
        hue="run",
        palette=palette,
        marker="o",
        ax=ax,
        errorbar=None,
        estimator=None,
    )
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
    _legend(ax)
    return fig
