"""The fidelity comparison as text (terminal) and as one self-contained HTML page with per-request overlays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.analysis.fidelity import PER_REQUEST, Fidelity
from kvbench.present import fmt
from kvbench.present.render import CSS, esc

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


def _value(r: dict[str, Any], side: str) -> str:
    v = r[side]
    return fmt.percent(v) if r["key"].endswith("hit_ratio") else fmt.number(v, fmt.COMPARE)


def _cells(r: dict[str, Any]) -> list[str]:
    name = f"{r['label']} {r['stat']}" if r["stat"] else r["label"]
    unit = f" ({r['unit']})" if r["unit"] and not r["key"].endswith("hit_ratio") else ""
    return [name + unit, _value(r, "sim"), _value(r, "real"), fmt.percent(r["rel_error"], 1, signed=True)]


HEAD = ["metric", "sim", "real", "sim error"]


def table_text(f: Fidelity) -> str:
    """A plain aligned table: one line per metric and statistic, then the worst latency errors."""
    lines = [HEAD] + [_cells(r) for r in f.rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(HEAD))]
    out = [f"sim {f.sim} vs real {f.real} ({len(f.pairs)} requests in both)"]
    for row in lines:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    worst = ", ".join(f"{s} {fmt.percent(f.worst(s), 1)}" for s in ("p50", "p90", "p99"))
    out.append(f"worst |error| of TTFT/TPOT/ITL/E2E: {worst}")
    return "\n".join(out)


def scatter(pairs: pandas.DataFrame) -> Figure:
    """Per request, sim (y) against real (x) for TTFT, TPOT and E2E; the diagonal is a perfect prediction."""
    import seaborn as sns
    from matplotlib.figure import Figure

    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        fig = Figure(figsize=(10.0, 3.4), layout="constrained")
        axes = fig.subplots(1, len(PER_REQUEST), squeeze=False)[0]
    for ax, (key, _) in zip(axes, PER_REQUEST):
        x, y = pairs[f"{key}_real"], pairs[f"{key}_sim"]
        ax.scatter(x, y, s=10, alpha=0.6)
        hi = float(max(x.max(), y.max())) if len(pairs) and x.notna().any() else 1.0
        ax.plot([0, hi], [0, hi], color="grey", linewidth=1, linestyle="--")
        name = key.removesuffix("_ms").upper()
        ax.set(title=name, xlabel=f"real {name} (ms)", ylabel=f"sim {name} (ms)")
    return fig


def cdfs(pairs: pandas.DataFrame) -> Figure:
    """CDF overlays of the per-request latencies, sim and real (kvbench.present.plots.latency_cdfs)."""
    import pandas as pd

    from kvbench.present.plots import latency_cdfs

    parts = [
        pd.DataFrame({"run": side, "metric": key.removesuffix("_ms").upper(), "value_ms": pairs[f"{key}_{side}"]})
        for key, _ in PER_REQUEST
        for side in ("sim", "real")
    ]
    return latency_cdfs(pd.concat(parts, ignore_index=True).dropna())


def _png(fig: Figure) -> str:
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(f: Fidelity) -> str:
    """One page: the comparison table and the two overlay figures (embedded PNGs, no network needed)."""
    th = "".join(f"<th>{h}</th>" for h in HEAD)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{esc(c)}</td>' if i else f"<td>{esc(c)}</td>" for i, c in enumerate(cs))
        + "</tr>"
        for cs in map(_cells, f.rows)
    )  # fmt: skip
    figures = "".join(
        f'<figure><h3>{esc(title)}</h3><img alt="{esc(title)}" src="data:image/png;base64,{_png(build(f.pairs))}">'
        f"</figure>"
        for title, build in (("Per request: sim vs real", scatter), ("Latency CDFs", cdfs))
    )
    title = f"kvbench fidelity: {f.sim} vs {f.real}"
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><main><header><h1>{esc(title)}</h1>"
        f'<p class="sub">{len(f.pairs)} requests in both runs; error = (sim − real) / real</p></header>'
        f'<section><h2>Comparison</h2><div class="wrap"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody>'
        f"</table></div>{figures}</section></main></body></html>\n"
    )
