"""The fidelity comparison as text (terminal), as a report section, and as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis.fidelity import PER_REQUEST, Fidelity
from kvbench.present import fmt
from kvbench.present.tables import Part, Section, Table

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

    from kvbench.present.collect import RunData


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
    out.append(f"worst |error| of TTFT/TPOT/ITL/E2E: {_worst(f)}")
    return "\n".join(out)


def _worst(f: Fidelity) -> str:
    return ", ".join(f"{s} {fmt.percent(f.worst(s), 1)}" for s in ("p50", "p90", "p99"))


def scatter(pairs: pandas.DataFrame) -> Figure:
    """Per request, sim (y) against real (x) for TTFT, TPOT and E2E; the diagonal is a perfect prediction."""
    from kvbench.present.plots import COLOURS, figure

    fig, axes = figure(1, len(PER_REQUEST), height=3.4, sharex=False, legend=False)
    for ax, (key, _) in zip(axes[0], PER_REQUEST):
        x, y = pairs[f"{key}_real"], pairs[f"{key}_sim"]
        ax.scatter(x, y, s=10, alpha=0.6, color=COLOURS[0], linewidths=0)
        hi = float(max(x.max(), y.max())) if len(pairs) and x.notna().any() else 1.0
        ax.plot([0, hi], [0, hi], color="grey", linewidth=1, linestyle="--")
        name = key.removesuffix("_ms").upper()
        ax.set(title=name, xlabel=f"real {name} (ms)", ylabel=f"sim {name} (ms)", xlim=(0, None), ylim=(0, None))
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


def _figures(f: Fidelity) -> list[Section]:
    from kvbench.present.plots import png

    caption = "Requests in both runs, joined on req_id. The dashed diagonal: the sim predicts the real run exactly."
    return [
        Section("fidelity-scatter", "Per request: sim vs real", caption, png(scatter(f.pairs))),
        Section("fidelity-cdf", "Latency CDFs: sim and real", "Finished requests in both runs.", png(cdfs(f.pairs))),
    ]


def fidelity_table(f: Fidelity) -> Table:
    return Table(HEAD, [_cells(r) for r in f.rows])


def fidelity_parts(runs: list[RunData]) -> list[Part]:
    """A Fidelity section when the runs hold a simulated run and a real one of the same workload (the first such
    pair, in report order); none otherwise."""
    from kvbench.analysis.fidelity import figure_rows, request_pairs

    def kind(r: RunData) -> str:
        return str((r.manifest.get("target") or {}).get("kind", ""))

    def workload(r: RunData) -> Any:
        return (r.manifest.get("workload") or {}).get("name")

    sims = [r for r in runs if kind(r) == "sim"]
    reals = [r for r in runs if kind(r) not in ("sim", "")]
    pair = next(((s, r) for s in sims for r in reals if workload(s) == workload(r)), None)
    if pair is None:
        return []
    sim, real = pair
    f = Fidelity(
        sim.name, real.name, figure_rows(sim.summary, real.summary), request_pairs(Path(sim.path), Path(real.path))
    )
    intro = (
        f"Simulated run {sim.name} against real run {real.name} ({len(f.pairs):,} requests in both); "
        f"error = (sim − real) / real. Worst |error| of TTFT/TPOT/ITL/E2E: {_worst(f)}."
    )
    return [Part("fidelity", "Fidelity: sim vs real", [fidelity_table(f)], _figures(f), intro=intro)]


def render_html(f: Fidelity) -> str:
    """One page: the comparison table and the two overlay figures (embedded PNGs, no network needed)."""
    from kvbench.present.render import render_page
    from kvbench.version import __version__

    return render_page(
        "fidelity.html.j2",
        title=f"kvbench fidelity: {f.sim} vs {f.real}",
        sub=f"{len(f.pairs)} requests in both runs; error = (sim − real) / real",
        fidelity_table=fidelity_table(f),
        figures=_figures(f),
        version=__version__,
    )
