"""The report's figures, in reading order: each a PNG drawn from the runs' frames, or a note saying why not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.plan.goodput import goodput_of
from kvbench.present import fmt
from kvbench.present.collect import CDF_POINTS, KV_SAMPLE, RunData
from kvbench.present.tables import Part, Section

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


def _png(fig: Figure) -> str:
    from kvbench.present.plots import png

    return png(fig)


def _svg(fig: Figure) -> str:
    from kvbench.present.plots import svg

    return svg(fig)


def _concat(frames: list[pandas.DataFrame | None]) -> pandas.DataFrame | None:
    import pandas as pd

    kept = [f for f in frames if f is not None and len(f)]
    return pd.concat(kept, ignore_index=True) if kept else None


def _has(df: pandas.DataFrame | None, *cols: str) -> bool:
    return df is not None and any(c in df and df[c].notna().any() and (df[c] != 0).any() for c in cols)


# (key, title, caption, panels: [(y label, {legend: column})], columns of which one must hold data)
TIME_FIGURES: tuple[tuple[str, str, str, list[tuple[str, dict[str, str]]], tuple[str, ...]], ...] = (
    (
        "latency-time",
        "Latency over time",
        "Percentiles of requests by the bucket they arrived in.",
        [
            ("TTFT (ms)", {"p50": "ttft_p50_ms", "p99": "ttft_p99_ms"}),
            ("TPOT (ms)", {"p50": "tpot_p50_ms", "p99": "tpot_p99_ms"}),
        ],
        ("ttft_p50_ms", "tpot_p50_ms"),
    ),
    (
        "throughput-time",
        "Throughput over time",
        "Requests finishing and output tokens per second.",
        [("finished req/s", {"req/s": "finished_s"}), ("output tokens/s", {"tok/s": "output_tok_s"})],
        ("finished_s",),
    ),
    (
        "inflight-time",
        "In-flight requests",
        "Requests arrived and not yet ended at each bucket's end.",
        [("in flight", {"in flight": "in_flight"})],
        ("in_flight",),
    ),
    (
        "cache-time",
        "Prefix cache hits over time",
        "Achieved: prompt tokens the target served from cache. Trace-implied: what an infinite cache would hold.",
        [("hit ratio (%)", {"achieved": "hit_pct", "trace-implied": "trace_hit_pct"})],
        ("hit_pct", "trace_hit_pct"),
    ),
    (
        "errors-time",
        "Failures over time",
        "Requests ending in ERROR, REJECT or CANCEL per second.",
        [("failed req/s", {"failed/s": "errors_s"})],
        ("errors_s",),
    ),
)


def _time_sections(ts: pandas.DataFrame | None, palette: dict[str, Any], bucket_s: float) -> list[Section]:
    from kvbench.present.plots import Panel, over_time

    width = f" Buckets of {fmt.number(bucket_s, fmt.MARK)} s, every run on one time axis."

    if ts is None:
        return [Section("over-time", "Over time", "", note="No requests in the log: nothing to draw over time.")]
    ts = ts.assign(
        finished_s=ts["finished"] / bucket_s,
        errors_s=ts["errors"] / bucket_s,
        hit_pct=ts["hit_ratio"] * 100,
        trace_hit_pct=ts["trace_hit_ratio"] * 100,
    )
    out = []
    for key, title, caption, panels, needed in TIME_FIGURES:
        if _has(ts, *needed):
            fig = over_time(ts, [Panel(*p) for p in panels], palette)
            out.append(Section(key, title, caption + width, _svg(fig)))
        else:
            out.append(Section(key, title, caption, note="No data for this figure in these runs."))
    return out


def _load_sections(load: pandas.DataFrame | None, bucket_s: float) -> list[Section]:
    from kvbench.present.plots import MAX_HEATMAP_COLUMNS, heatmap

    width = (
        f" Buckets of {fmt.number(bucket_s, fmt.MARK)} s (merged to at most {MAX_HEATMAP_COLUMNS} columns); "
        "every run on one time axis."
    )
    caption_u = "Share of each time bucket an instance spent computing batch steps (simulator steps table)." + width
    caption_kv = "Mean KV-cache blocks in use / capacity while busy (simulator steps table); grey: idle." + width
    if load is None:
        note = "No steps table (real-endpoint runs record no per-instance steps): heatmaps omitted."
        return [
            Section("util-heatmap", "Per-instance utilisation", caption_u, note=note),
            Section("kv-heatmap", "Per-instance KV occupancy", caption_kv, note=note),
        ]
    return [
        Section(
            "util-heatmap",
            "Per-instance utilisation",
            caption_u,
            _png(heatmap(load, "utilisation", "utilisation", vmax=1.0, fill=0.0, bucket_s=bucket_s)),
        ),
        Section(
            "kv-heatmap",
            "Per-instance KV occupancy",
            caption_kv,
            _png(heatmap(load, "kv_occupancy", "KV occupancy", vmax=1.0, bucket_s=bucket_s)),
        ),
    ]


def build_sections(
    runs: list[RunData], goodputs: list[tuple[str, dict[str, Any]]], palette: dict[str, Any], bucket_s: float
) -> list[Section]:
    """Every figure of the Figures part, in reading order; figures without data become notes."""
    import pandas as pd

    from kvbench.present.plots import attainment_curve, kv_transfers, latency_cdfs

    sections: list[Section] = []
    for label, doc in goodputs:
        curve = pd.DataFrame(doc["curve"]).assign(run=label)
        sections.append(
            Section(
                f"goodput-{len(sections)}",
                f"SLO attainment vs rate: {label}",
                "Each point is one probe run at the arrival rate it achieved (dash-dotted: the nominal rate it "
                "asked for); goodput is the achieved rate of the highest probe meeting the target.",
                _svg(attainment_curve(curve, doc["target"], goodput_of(doc))),
            )
        )
    cdf = _concat([r.cdf for r in runs])
    caption = f"Finished requests; each curve is drawn from {CDF_POINTS} quantiles; one x scale for all three."
    sections.append(
        Section("cdf", "Latency CDFs", caption, _svg(latency_cdfs(cdf, palette)))
        if cdf is not None
        else Section("cdf", "Latency CDFs", caption, note="No finished requests: no latency to draw.")
    )
    sections += _time_sections(_concat([r.timeseries for r in runs]), palette, bucket_s)
    sections += _load_sections(_concat([r.load for r in runs]), bucket_s)
    kv = _concat([r.kv for r in runs])
    caption = (
        "Fitted t = α + bytes/β per run: left of the dotted knee (α·β) transfers are RTT-bound, right of it "
        f"bandwidth-bound. Up to {fmt.count(KV_SAMPLE)} transfers per run."
    )
    sections.append(
        Section("kv-transfer", "KV transfer time vs size", caption, _png(kv_transfers(kv, palette)))
        if kv is not None
        else Section("kv-transfer", "KV transfer time vs size", caption, note="No KV transfers in these runs.")
    )
    return sections


def figure_parts(
    runs: list[RunData], goodputs: list[tuple[str, dict[str, Any]]], palette: dict[str, Any], bucket_s: float
) -> list[Part]:
    """The report's figure sections: figures, requests, server metrics and (sim and real runs given) fidelity."""
    from kvbench.present.fidelity import fidelity_parts
    from kvbench.present.figures_runs import request_sections, server_part

    parts = [Part("figures", "Figures", figures=build_sections(runs, goodputs, palette, bucket_s))]
    if runs:
        parts.append(Part("requests", "Requests", figures=request_sections(runs, palette)))
        parts.append(server_part(runs, palette))
    return parts + fidelity_parts(runs)
