"""Figure builders of a plan's report, pure DataFrame -> Figure: the Pareto fronts of each rung and the work of
successive halving per rung against an exhaustive search."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from kvbench.present import fmt
from kvbench.present.plots import COLOURS, figure, legend, tick

POINT, FRONT, CHOSEN, EXHAUSTIVE = "#9aa4ae", COLOURS[0], COLOURS[3], "#c9ced4"
# (flag column, x column, x label, higher x is better)
FRONTS = (
    ("pareto_user", "user_tokens_per_s", "one user's decode rate (tokens/s = 1000 / TPOT p50)", True),
    ("pareto_ttft", "ttft_ms.p90", "TTFT p90 at goodput (ms)", False),
)


def _front_panel(ax: Axes, g: pd.DataFrame, y: str, spec: tuple[str, str, str, bool], chosen: str | None) -> None:
    """Every candidate as a grey point, the front as a line through its points (by x), the chosen one a star."""
    flag, x, xlabel, _ = spec
    pts = g[g[x].notna() & g[y].notna()]
    ax.scatter(pts[x], pts[y], s=16, color=POINT, alpha=0.7, linewidths=0, label="candidate", zorder=2)
    on = pts[pts[flag].astype(bool)].sort_values(x)
    ax.plot(on[x], on[y], color=FRONT, marker="o", markersize=4, linewidth=1.5, label="Pareto front", zorder=3)
    won = pts[pts["candidate"] == chosen]
    if len(won):
        ax.scatter(won[x], won[y], s=140, marker="*", color=CHOSEN, edgecolors="black", linewidths=0.6, zorder=4)
    ax.set_xlim(left=0, right=max(float(pts[x].max()) * 1.08, 1e-9) if len(pts) else None)
    ax.set_ylim(bottom=0, top=max(float(pts[y].max()) * 1.1, 1e-9) if len(pts) else None)
    ax.xaxis.set_major_formatter(FuncFormatter(tick))
    ax.yaxis.set_major_formatter(FuncFormatter(tick))
    ax.set_xlabel(xlabel)


def pareto_fronts(rungs: pd.DataFrame, y: str, ylabel: str, chosen: str | None) -> Figure:
    """One row per rung (figures of replays of one length compare only among themselves), two panels: the ranking
    figure `y` against one user's tokens/s and against TTFT p90, from zero. rungs: rung, requests, candidate, y,
    user_tokens_per_s, ttft_ms.p90, pareto_user, pareto_ttft (rows of completed searches)."""
    groups = list(rungs.groupby("rung", sort=True))
    fig, axes = figure(len(groups), 2, height=3.3, sharex=False)
    fig.subplots_adjust(hspace=0.55)
    for row, (rung, g) in zip(axes, groups):
        for ax, spec in zip(row, FRONTS):
            _front_panel(ax, g, y, spec, chosen)
        n = f"{len(g):,} candidate{'s' if len(g) != 1 else ''}"
        title = f"rung {int(rung) + 1}: {n} on {int(g['requests'].iloc[0]):,} requests"
        row[0].set_title(title, loc="left")
        row[0].set_ylabel(ylabel)
        star = ("chosen deployment", {"marker": "*", "color": CHOSEN, "markersize": 11, "linestyle": "none"})
        legend(row[-1], [star] if (g["candidate"] == chosen).any() else [])
    return fig


def _bars(ax: Axes, labels: list[str], values: list[Any], colours: list[str], style: fmt.Style) -> None:
    bars = ax.bar(range(len(values)), values, color=colours, width=0.6)
    ax.bar_label(bars, [fmt.number(v, style) for v in values], padding=2, fontsize="small")
    ax.set_xticks(range(len(values)), labels)
    ax.set_ylim(0, max(values + [1e-9]) * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(tick))
    ax.grid(axis="x", visible=False)


def halving_work(rows: list[dict[str, Any]], exhaustive: float | None) -> Figure:
    """Left: candidates searched per rung (its prefix length below). Right: what each rung simulated, in
    full-length simulations, beside an exhaustive search of every candidate on the full length."""
    fig, axes = figure(1, 2, height=3.2, sharex=False, legend=False)
    labels = [f"rung {r['rung']}\n{r['requests']:,} req" for r in rows]
    _bars(axes[0][0], labels, [r["searched"] for r in rows], [FRONT] * len(rows), fmt.TABLE)
    axes[0][0].set(ylabel="candidates searched", title="Candidates per rung")
    sims = [r["full_simulations"] or 0.0 for r in rows]
    extra = [("exhaustive", exhaustive)] if exhaustive else []
    work = sims + [v for _, v in extra]
    colours = [FRONT] * len(rows) + [EXHAUSTIVE] * len(extra)
    _bars(axes[0][1], labels + [f"{name}\n(estimate)" for name, _ in extra], work, colours, fmt.ONE_DECIMAL)
    axes[0][1].set(ylabel="full-length simulations", title=f"Work: {fmt.number(sum(sims), fmt.ONE_DECIMAL)} in all")
    return fig
