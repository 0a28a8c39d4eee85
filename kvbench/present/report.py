"""`kvbench report`: gather each run's figures with SQL, draw them, and write one self-contained HTML or Markdown file.

Everything heavy is aggregated in DuckDB: latency CDFs are drawn from quantiles (never from every request),
KV transfers from a deterministic sample, the rest from time buckets. Rendering lives in report_render.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

CDF_POINTS = 400  # quantiles per latency CDF: smooth to the eye at any run size
KV_SAMPLE = 4_000  # KV transfers drawn per run
FAILURE_ROWS = 20  # distinct (kind, detail) rows of the failures table
CDF_METRICS = {"TTFT": "ttft_ns", "TPOT": "tpot_ns", "E2E": "e2e_ns"}


@dataclass
class RunData:
    """What the report shows of one run (frames carry a `run` column so runs concatenate)."""

    name: str
    path: str
    manifest: dict
    slo: dict  # thresholds in ms that `good` used
    summary: dict
    cdf: Any  # DataFrame run, metric, value_ms
    timeseries: Any  # DataFrame (metrics.timeseries)
    load: Any  # DataFrame (metrics.instance_load) or None without a steps table
    kv: Any  # DataFrame run, nbytes, time_ms (sample) or None without transfers
    failures: list = field(default_factory=list)  # (kind, detail, count)


def _cdf(con, name: str):
    """CDF_POINTS quantiles of each latency over finished requests. The columns are fetched once and sorted by
    numpy: several times faster than DuckDB's quantile_cont with a list of 400 fractions."""
    import numpy as np
    import pandas as pd

    from kvbench.units import ns_to_ms

    cols = con.execute(
        f"SELECT {', '.join(CDF_METRICS.values())} FROM per_request WHERE status = 'FINISH'"
    ).fetchnumpy()
    ps = np.linspace(0, 1, CDF_POINTS)
    frames = []
    for metric, col in CDF_METRICS.items():
        values = np.ma.compressed(np.ma.masked_invalid(np.ma.asarray(cols[col], dtype=float)))
        if len(values):
            frames.append(pd.DataFrame({"run": name, "metric": metric, "value_ms": ns_to_ms(np.quantile(values, ps))}))
    return pd.concat(frames, ignore_index=True) if frames else None


def _kv_sample(con, name: str):
    """Up to KV_SAMPLE transfers (nbytes, time_ms); hash() is deterministic, so a run always gives one sample."""
    from kvbench.analysis.metrics import sql_text
    from kvbench.units import ns_to_ms

    made = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'kv_transfers' AND temporary"
    ).fetchone()[0]
    source = "kv_transfers" if made else f"({sql_text('kv_transfers').rstrip().rstrip(';')})"  # figures() makes it
    df = con.execute(
        f"SELECT nbytes, duration_ns FROM {source} WHERE duration_ns > 0 AND nbytes > 0 "
        "ORDER BY hash(req_id, start_ns) LIMIT ?",
        [KV_SAMPLE],
    ).df()
    if df.empty:
        return None
    df.insert(0, "run", name)
    df["time_ms"] = ns_to_ms(df.pop("duration_ns"))
    return df


def _failures(con) -> list:
    return con.execute(
        "SELECT CAST(kind AS VARCHAR), coalesce(detail, ''), count(*) AS n FROM events "
        "WHERE kind IN ('ERROR', 'REJECT', 'CANCEL') GROUP BY ALL ORDER BY n DESC, 1, 2 LIMIT ?",
        [FAILURE_ROWS],
    ).fetchall()


def collect_run(run_dir: Path, name: str, slo, bucket_s: float) -> RunData:
    """One connection per run: the SQL views are prepared once and every figure reads the same temp tables."""
    from kvbench.analysis import metrics
    from kvbench.analysis.figures import figures
    from kvbench.analysis.runset import check_run, open_runs
    from kvbench.units import ns_to_s

    manifest = check_run(run_dir)
    slo = slo if slo is not None else metrics.slo_from_manifest(manifest)
    con = open_runs([run_dir])
    con.execute("SET enable_progress_bar = false")  # stdout is the user's; rich shows progress
    try:
        summary = figures(con, slo)  # also builds per_request and the kv_transfers temp table
        ts = metrics.timeseries(con, bucket_s, slo)
        has_steps = con.execute("SELECT count(*) FROM (SELECT 1 FROM steps LIMIT 1)").fetchone()[0] > 0
        load = metrics.instance_load(con, bucket_s) if has_steps else None
        data = RunData(
            name,
            str(run_dir),
            manifest,
            slo.as_ms(),
            summary,
            _cdf(con, name),
            ts,
            load,
            _kv_sample(con, name),
            _failures(con),
        )
    finally:
        con.close()
    for frame in (data.timeseries, data.load):
        if frame is not None:  # the connection named the run by its directory; two runs may share that name
            frame["run"] = name
            frame["t_s"] = ns_to_s(frame["t_ns"])
    return data


@dataclass(frozen=True)
class Section:
    """One figure of the report: its PNG (base64) or, when the runs hold no data for it, a note saying why."""

    key: str
    title: str
    caption: str
    png_b64: str | None = None
    note: str = ""


def _png(fig) -> str:
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None})  # no version stamp: same bytes each time
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _concat(frames: list):
    import pandas as pd

    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _has(df, *cols: str) -> bool:
    return df is not None and any(c in df and df[c].notna().any() and (df[c] != 0).any() for c in cols)


def _time_sections(ts, palette: dict, bucket_s: float) -> list[Section]:
    from kvbench.present.plots import Panel, over_time

    if ts is None:
        return [Section("over-time", "Over time", "", note="No requests in the log: nothing to draw over time.")]
    ts = ts.assign(
        finished_s=ts["finished"] / bucket_s,
        errors_s=ts["errors"] / bucket_s,
        hit_pct=ts["hit_ratio"] * 100,
        trace_hit_pct=ts["trace_hit_ratio"] * 100,
    )
    specs = [
        (
            "latency-time",
            "Latency over time",
            "Percentiles of requests by the bucket they arrived in.",
            [
                Panel("TTFT (ms)", {"p50": "ttft_p50_ms", "p99": "ttft_p99_ms"}),
                Panel("TPOT (ms)", {"p50": "tpot_p50_ms", "p99": "tpot_p99_ms"}),
            ],
            ("ttft_p50_ms", "tpot_p50_ms"),
        ),
        (
            "throughput-time",
            "Throughput over time",
            "Requests finishing and output tokens per second.",
            [Panel("finished req/s", {"req/s": "finished_s"}), Panel("output tokens/s", {"tok/s": "output_tok_s"})],
            ("finished_s",),
        ),
        (
            "inflight-time",
            "In-flight requests",
            "Requests arrived and not yet ended at each bucket's end.",
            [Panel("in flight", {"in flight": "in_flight"})],
            ("in_flight",),
        ),
        (
            "cache-time",
            "Prefix cache hits over time",
            "Achieved: prompt tokens the target served from cache. Trace-implied: what an infinite cache would hold.",
            [Panel("hit ratio (%)", {"achieved": "hit_pct", "trace-implied": "trace_hit_pct"})],
            ("hit_pct", "trace_hit_pct"),
        ),
        (
            "errors-time",
            "Failures over time",
            "Requests ending in ERROR, REJECT or CANCEL per second.",
            [Panel("failed req/s", {"failed/s": "errors_s"})],
            ("errors_s",),
        ),
    ]
    out = []
    for key, title, caption, panels, needed in specs:
        if _has(ts, *needed):
            out.append(Section(key, title, caption, _png(over_time(ts, panels, palette))))
        else:
            out.append(Section(key, title, caption, note="No data for this figure in these runs."))
    return out


def _load_sections(load) -> list[Section]:
    from kvbench.present.plots import heatmap

    caption_u = "Share of each time bucket an instance spent computing batch steps (simulator steps table)."
    caption_kv = "Mean KV-cache blocks in use / capacity while busy (simulator steps table); grey: idle."
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
            _png(heatmap(load, "utilisation", "utilisation", vmax=1.0, fill=0.0)),
        ),
        Section(
            "kv-heatmap",
            "Per-instance KV occupancy",
            caption_kv,
            _png(heatmap(load, "kv_occupancy", "KV occupancy", vmax=1.0)),
        ),
    ]


def build_sections(
    runs: list[RunData], goodputs: list[tuple[str, dict]], palette: dict, bucket_s: float
) -> list[Section]:
    """Every figure of the report, in reading order; figures without data become notes."""
    import pandas as pd

    from kvbench.present.plots import attainment_curve, kv_transfers, latency_cdfs

    sections: list[Section] = []
    for label, doc in goodputs:
        curve = pd.DataFrame(doc["curve"]).assign(run=label)
        sections.append(
            Section(
                f"goodput-{len(sections)}",
                f"SLO attainment vs rate: {label}",
                "Each point is one probe run; goodput is the highest rate meeting the target.",
                _png(attainment_curve(curve, doc["target"], doc.get("rate"))),
            )
        )
    cdf = _concat([r.cdf for r in runs])
    caption = f"Finished requests; each curve is drawn from {CDF_POINTS} quantiles."
    sections.append(
        Section("cdf", "Latency CDFs", caption, _png(latency_cdfs(cdf, palette)))
        if cdf is not None
        else Section("cdf", "Latency CDFs", caption, note="No finished requests: no latency to draw.")
    )
    sections += _time_sections(_concat([r.timeseries for r in runs]), palette, bucket_s)
    sections += _load_sections(_concat([r.load for r in runs]))
    kv = _concat([r.kv for r in runs])
    caption = (
        "Fitted t = α + bytes/β per run: left of the dotted knee (α·β) transfers are RTT-bound, right of it "
        f"bandwidth-bound. Up to {KV_SAMPLE:,} transfers per run."
    )
    sections.append(
        Section("kv-transfer", "KV transfer time vs size", caption, _png(kv_transfers(kv, palette)))
        if kv is not None
        else Section("kv-transfer", "KV transfer time vs size", caption, note="No KV transfers in these runs.")
    )
    return sections


# (summary key, label, format, direction): +1 higher is better, -1 lower is better, 0 neither.
ROWS = [
    ("requests", "requests", "int", 0),
    ("finished", "finished", "int", 1),
    ("errors", "errors", "int", -1),
    ("rejected", "rejected", "int", -1),
    ("cancelled", "cancelled", "int", -1),
    ("running", "still running at the end", "int", -1),
    ("duration_s", "duration (s)", "num", 0),
    ("request_throughput", "request throughput (req/s)", "num", 1),
    ("output_token_throughput", "output token throughput (tok/s)", "num", 1),
    ("goodput", "goodput (good req/s)", "num", 1),
    ("slo_attainment", "SLO attainment", "pct", 1),
]
ROWS += [
    (f"{m}.{s}", f"{label} {s} (ms)", "num", -1)
    for m, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))
    for s in ("mean", "p50", "p90", "p99")
]
ROWS += [
    ("tbt_ms.p99", "TBT p99 (ms)", "num", -1),
    ("client_lag_ms.p99", "client lag p99 (ms)", "num", -1),
    ("queue_ms.p99", "queueing p99 (ms)", "num", -1),
    ("prefix_hit_ratio", "prefix hit ratio, achieved", "pct", 1),
    ("trace_hit_ratio", "prefix hit ratio, trace-implied", "pct", 0),
    ("input_len_ratio", "input length, achieved / intended", "num", 0),
    ("input_len_delta.p50", "input length, achieved − intended p50 (tokens)", "num", 0),
    ("kv_transfer.count", "KV transfers", "int", 0),
    ("kv_transfer.mean_ms", "KV transfer mean (ms)", "num", -1),
    ("kv_transfer.ttft_share", "KV transfer share of TTFT", "pct", -1),
    ("preemptions", "preemptions", "int", -1),
]


def fmt_value(value, kind: str) -> str:
    """A summary figure as text: counts with separators, ratios as %, the rest to 4 significant digits."""
    if value is None or value != value:  # None or NaN
        return "–"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{value * 100:.2f} %"
    return f"{value:,.4g}" if abs(value) < 1e3 else f"{value:,.0f}"


class Row(NamedTuple):
    """One metric of the summary table across runs."""

    key: str
    label: str
    values: list[str]  # formatted, one per run
    direction: int
    raw: list
    kind: str  # int | num | pct


def summary_rows(summaries: list[dict]) -> list[Row]:
    """A Row for every metric some run has a value for."""
    out = []
    for key, label, kind, direction in ROWS:
        raw = [s.get(key) for s in summaries]
        if all(v is None for v in raw):
            continue
        out.append(Row(key, label, [fmt_value(v, kind) for v in raw], direction, raw, kind))
    return out


def delta(base, value, direction: int, kind: str = "num") -> tuple[str, str]:
    """(text, css class) of value - base: '+1,234 (+12.3%)' (ratios: '+1.50 pp'), better/worse/same by direction."""
    if base is None or value is None or base != base or value != value:
        return "–", "same"
    d = value - base
    if kind == "pct":
        text = f"{d * 100:+.2f} pp"
    else:
        text = (f"{d:+,.0f}" if abs(d) >= 1e3 or kind == "int" else f"{d:+.4g}") + (
            f" ({d / abs(base):+.1%})" if base else ""
        )
    if d == 0 or direction == 0:
        return text, "same"
    return text, "better" if (d > 0) == (direction > 0) else "worse"


TARGET_BUCKETS = 240  # over-time figures aim at about this many buckets when --bucket is not given


def auto_bucket_s(span_ns: int) -> float:
    """The smallest 1/2/5 x 10^k seconds that cuts `span_ns` into at most TARGET_BUCKETS buckets (>= 1 ms)."""
    from kvbench.units import ns_to_s

    raw = max(ns_to_s(span_ns) / TARGET_BUCKETS, 1e-3)
    exp = math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        if step * 10.0**exp >= raw * (1 - 1e-9):
            return round(step * 10.0**exp, 6)
    return 10.0 ** (exp + 1)


def _split_inputs(paths: list[Path]) -> tuple[list[Path], list[tuple[str, dict]]]:
    """Run directories, and goodput results (a goodput.json or a directory holding one and no run.json)."""
    from kvbench.analysis.runset import expand
    from kvbench.plan.goodput import read_result

    runs, goodputs = [], []
    for p in expand(paths):
        if (p.is_dir() and (p / "goodput.json").is_file() and not (p / "run.json").is_file()) or (
            p.is_file() and p.suffix == ".json"
        ):
            goodputs.append((p.resolve().name if p.is_dir() else p.stem, read_result(p)))
        else:
            runs.append(p)
    return runs, goodputs


def _span_ns(run_dir: Path) -> int:
    """Last event time of a run (one column scan; run.json counts are missing in killed runs)."""
    import duckdb

    from kvbench.analysis.runset import check_parts, check_run

    check_run(run_dir)
    files = check_parts(run_dir, "events")
    if not files:
        return 0
    con = duckdb.connect()
    try:
        return int(con.execute("SELECT coalesce(max(t_ns), 0) FROM read_parquet(?)", [files]).fetchone()[0])
    finally:
        con.close()


def build_report(
    paths: list[Path], fmt: str = "html", slo_text: str | None = None, bucket_s: float | None = None, progress=None
) -> str:
    """The report text for runs (and goodput results) at `paths`."""
    from kvbench import __version__
    from kvbench.analysis.metrics import parse_slo
    from kvbench.analysis.runset import run_names
    from kvbench.config import ConfigError
    from kvbench.present.plots import palette_for
    from kvbench.present.render import render_html, render_md

    if fmt not in ("html", "md"):
        raise ConfigError(f"--format must be html or md, got {fmt!r}")
    if bucket_s is not None and not bucket_s > 0:
        raise ConfigError(f"--bucket must be > 0 seconds, got {bucket_s}")
    slo = parse_slo(slo_text) if slo_text else None
    dirs, goodputs = _split_inputs(paths)
    names = run_names(dirs) if dirs else []
    if len(set(names)) != len(names):
        raise ConfigError("the same run directory is given twice")
    if bucket_s is None:  # one width for every run, so their curves share the time axis
        bucket_s = auto_bucket_s(max([_span_ns(d) for d in dirs], default=0))
    runs = []
    for d, name in zip(dirs, names):
        runs.append(collect_run(d, name, slo, bucket_s))
        if progress:
            progress(name)
    rows = summary_rows([r.summary for r in runs])
    if fmt == "md":
        return render_md(runs, rows, goodputs, delta)
    palette = palette_for(names)
    sections = build_sections(runs, goodputs, palette, bucket_s)
    return render_html(runs, sections, rows, goodputs, palette, delta, __version__)


def report_command(paths: list[Path], out: Path, fmt: str, slo_text: str | None, bucket_s: float | None) -> None:
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("reading runs") as status:
        text = build_report(paths, fmt, slo_text, bucket_s, progress=lambda n: status.update(f"read {n}"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    console.print(f"report → {out}")
