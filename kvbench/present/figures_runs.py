"""The report's request and server figures: latency vs throughput across runs, token histograms, TTFT against
prompt and cached tokens, and scraped Prometheus families over time (labels parsed by prometheus_client)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kvbench.present import fmt
from kvbench.present.collect import REQUEST_SAMPLE, RunData
from kvbench.present.plots import colour, figure, legend, png, run_entries, svg, tick
from kvbench.present.tables import Part, Section, Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HIST_BINS = 40
MAX_FAMILIES = 8  # Prometheus families drawn; the table lists them all
MAX_SERIES = 8  # label sets drawn per family and run


def latency_vs_throughput(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """One point per run: output token throughput (x) against TTFT and TPOT p50/p99 (y, from zero), the runs
    joined in report order (GuideLLM's sweep plot). df: run, tok_s and the latency columns."""
    panels = [("TTFT (ms)", "ttft_ms.p50", "ttft_ms.p99"), ("TPOT (ms)", "tpot_ms.p50", "tpot_ms.p99")]
    fig, axes = figure(1, 2, height=3.4, sharex=False)
    for ax, (label, p50, p99) in zip(axes[0], panels):
        for dash, col in (("-", p50), ("--", p99)):
            ax.plot(df["tok_s"], df[col], color="0.6", linestyle=dash, linewidth=1)
        for i, (_, row) in enumerate(df.iterrows()):
            c = colour(palette, row["run"], i)
            ax.plot([row["tok_s"]], [row[p50]], "o", color=c)
            ax.plot([row["tok_s"]], [row[p99]], "s", color=c, fillstyle="none")
        ax.set(xlabel="output token throughput (tok/s)", ylabel=label, xlim=(0, None), ylim=(0, None))
        ax.yaxis.set_major_formatter(tick)
    styles = [
        ("p50", {"color": "0.3", "marker": "o", "linestyle": "-"}),
        ("p99", {"color": "0.3", "marker": "s", "fillstyle": "none", "linestyle": "--"}),
    ]
    legend(axes[0][-1], run_entries(list(df["run"]), palette) + styles, title="run")
    return fig


def token_bins(values: np.ndarray) -> np.ndarray:
    """HIST_BINS equal-width bins from 0 to the largest count (one set for every run, so bars compare)."""
    top = max(float(np.nanmax(values)) if len(values) else 1.0, 1.0)
    return np.linspace(0, top, HIST_BINS + 1)


def token_histograms(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """Input and output tokens per request, one step histogram per run on shared bins. df: run, input_tokens,
    output_tokens."""
    fig, axes = figure(1, 2, height=3.2, sharex=False)
    runs = list(dict.fromkeys(df["run"]))
    for ax, col in zip(axes[0], ("input_tokens", "output_tokens")):
        bins = token_bins(df[col].to_numpy(dtype=float))
        for i, run in enumerate(runs):
            values = df.loc[df["run"] == run, col].to_numpy(dtype=float)
            ax.hist(values, bins=bins, histtype="step", color=colour(palette, run, i), linewidth=1.3)
        width = fmt.number(bins[1] - bins[0], fmt.TICK)
        ax.set(xlabel=f"{col.replace('_', ' ')} (bins of {width})", ylabel="requests", xlim=(0, None))
    legend(axes[0][-1], run_entries(runs, palette), title="run")
    return fig


def ttft_scatter(df: pd.DataFrame, palette: dict | None = None) -> Figure:
    """TTFT (y, from zero) against prompt length and against cached prompt tokens. df: run, input_tokens,
    cached_tokens, ttft_ms."""
    fig, axes = figure(1, 2, height=3.4, sharex=False)
    runs = list(dict.fromkeys(df["run"]))
    for ax, col, xlabel in zip(axes[0], ("input_tokens", "cached_tokens"), ("prompt tokens", "cached prompt tokens")):
        for i, run in enumerate(runs):
            part = df[df["run"] == run]
            ax.scatter(part[col], part["ttft_ms"], s=6, alpha=0.45, linewidths=0, color=colour(palette, run, i))
        ax.set(xlabel=xlabel, ylabel="TTFT (ms)", xlim=(0, None), ylim=(0, None))
        ax.yaxis.set_major_formatter(tick)
    legend(axes[0][-1], run_entries(runs, palette), title="run")
    return fig


def request_sections(runs: list[RunData], palette: dict[str, Any]) -> list[Section]:
    """Latency vs throughput (two runs or more), token histograms and TTFT scatters."""
    out = []
    points = [{"run": r.name, "tok_s": r.summary.get("output_token_throughput"), **r.summary} for r in runs]
    frame = pd.DataFrame(points)
    cols = ["tok_s", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99"]
    if len(runs) > 1 and all(c in frame for c in cols) and frame[cols].notna().all().all():
        caption = "One point per run, joined in report order: how latency grows with the load a run achieved."
        out.append(
            Section(
                "latency-throughput",
                "Latency vs throughput",
                caption,
                svg(latency_vs_throughput(frame[["run", *cols]], palette)),
            )
        )
    reqs = [r.requests for r in runs if r.requests is not None]
    if not reqs:
        return out + [Section("tokens", "Tokens per request", "", note="No finished requests: no tokens to draw.")]
    df = pd.concat(reqs, ignore_index=True)
    sample = f"Up to {REQUEST_SAMPLE:,} finished requests per run (a fixed sample)."
    out.append(
        Section(
            "tokens", "Tokens per request", sample + " Bins shared by the runs.", svg(token_histograms(df, palette))
        )
    )
    caption = sample + " Cached tokens: the prompt tokens the target served from its prefix cache."
    out.append(
        Section("ttft-tokens", "TTFT vs prompt length and cached tokens", caption, png(ttft_scatter(df, palette)))
    )
    return out


def label_columns(labels: pd.Series) -> pd.DataFrame:
    """Prometheus label text (`a="x",b="y"`, as scraped) -> one column per label name, parsed by
    prometheus_client's text parser (escapes and quoting as the exposition format defines them)."""
    from prometheus_client.parser import text_string_to_metric_families

    parsed: dict[str, dict[str, str]] = {}
    for text in labels.unique():
        sample = f"m{{{text}}} 0\n" if text else "m 0\n"
        try:
            parsed[text] = dict(next(iter(next(iter(text_string_to_metric_families(sample))).samples)).labels)
        except (ValueError, StopIteration):
            parsed[text] = {"labels": text}  # not valid exposition text: kept whole in one column
    return pd.DataFrame([parsed[t] for t in labels], index=labels.index).fillna("")


def family_figure(df: pd.DataFrame, families: list[str], palette: dict | None = None) -> Figure:
    """One panel per family: value over time, a line per (run, label set), labelled by the label columns.
    df: run, t_s, name, value and one column per label."""
    fig, axes = figure(len(families), height=2.2)
    label_cols = [c for c in df.columns if c not in ("run", "t_s", "name", "value", "labels")]
    runs = list(dict.fromkeys(df["run"]))
    for ax, name in zip(axes[:, 0], families):
        part = df[df["name"] == name]
        for i, run in enumerate(runs):
            sets = part[part["run"] == run].groupby("labels", sort=True)
            for (_labels, series), dash in zip(list(sets)[:MAX_SERIES], ["-", "--", ":", "-."] * MAX_SERIES):
                text = ", ".join(f"{c}={series[c].iloc[0]}" for c in label_cols if series[c].iloc[0])
                ax.plot(
                    series["t_s"],
                    series["value"],
                    color=colour(palette, run, i),
                    linestyle=dash,
                    linewidth=1.1,
                    label=f"{run} {text}".strip() if len(runs) > 1 or text else "_",
                )
        ax.set(title=name, ylabel="value", xlabel="time since run start (s)")
        ax.set_ylim(bottom=min(0.0, float(part["value"].min())))
        ax.yaxis.set_major_formatter(tick)
        legend(ax)
    return fig


def server_part(runs: list[RunData], palette: dict[str, Any]) -> Part:
    """Scraped server metrics: a table of the families and their label columns, and the first families over time."""
    frames = [r.server for r in runs if r.server is not None]
    if not frames:
        note = "No scraped server metrics in these runs (a profile's scrape_interval_s turns scraping on)."
        return Part("server", "Server metrics", note=note)
    df = pd.concat(frames, ignore_index=True)
    df = pd.concat([df, label_columns(df["labels"])], axis=1)
    label_cols = [c for c in df.columns if c not in ("run", "t_s", "name", "value", "labels")]
    rows = []
    for name, part in df.groupby("name", sort=True):
        used = [c for c in label_cols if (part[c] != "").any()]
        rows.append([name, ", ".join(used) or fmt.EN_DASH, fmt.count(part["labels"].nunique()), fmt.count(len(part))])
    families = [r[0] for r in rows][:MAX_FAMILIES]
    caption = f"Families in name order, the first {MAX_FAMILIES}; at most {MAX_SERIES} label sets per run and family."
    fig = Section(
        "server-metrics",
        "Scraped families over time",
        caption,
        svg(family_figure(df[df["name"].isin(families)], families, palette)),
    )
    table = Table(["family", "label columns", "label sets", "samples"], rows, num_from=2)
    return Part("server", "Server metrics", [table], [fig])
