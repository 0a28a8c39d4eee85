"""`kvbench summary`: compute a run's figures, write RUN/summary.json and print them as rich tables."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import IO, Any

from kvbench.analysis.metrics import LATENCIES, Slo, slo_from_manifest
from kvbench.analysis.runset import check_run
from kvbench.config import ConfigError

SUMMARY_VERSION = 1
_LABELS = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "itl_ms": "ITL",
    "e2e_ms": "E2E",
    "client_lag_ms": "client lag",
    "tbt_ms": "TBT (Mooncake)",
    "queue_ms": "queueing (sim)",
}


def build(run_dir: str | Path, slo: Slo | None = None, bucket_s: float = 1.0) -> dict[str, Any]:
    """The summary.json document: run identity, SLOs used, flat figures, bootstrap samples, time buckets."""
    from kvbench.analysis.bootstrap import samples
    from kvbench.analysis.figures import figures
    from kvbench.analysis.metrics import open_runs, timeseries

    run_dir = Path(run_dir)
    manifest = check_run(run_dir)
    slo = slo if slo is not None else slo_from_manifest(manifest)
    con = open_runs([run_dir])
    try:
        figs = figures(con, slo)
        ts = timeseries(con, bucket_s, slo)
        kept = [
            "t_s",
            "arrivals",
            "finished",
            "errors",
            "in_flight",
            "output_tok_s",
            "good",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "tpot_p50_ms",
            "tpot_p99_ms",
            "hit_ratio",
            "trace_hit_ratio",
        ]
        series = {c: [None if v != v else v for v in ts[c].astype(float).tolist()] for c in kept}
        lag = {"client_lag": manifest["client_lag"]} if "client_lag" in manifest else {}  # real endpoints only
        return {
            "kvbench_summary": SUMMARY_VERSION,
            "run_id": manifest.get("run_id"),
            "run_dir": str(run_dir),
            "status": _status(manifest),
            **lag,
            "slo_ms": slo.as_ms(),
            "metrics": figs,
            "samples": samples(con, seed=int(manifest.get("seed") or 0)),
            "timeseries": {"bucket_s": bucket_s, **series},
        }
    finally:
        con.close()


def _num(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def client_lag_warning(client_lag: Any, run: str) -> str | None:
    """One line when run.json's client_lag says the client fell behind (behind is true), else None."""
    if not isinstance(client_lag, dict) or client_lag.get("behind") is not True:
        return None
    return (
        f"run {run}: the client fell behind the schedule: send lag p99 {_num(client_lag.get('p99_ms'), '.1f')} "
        f"ms > threshold {_num(client_lag.get('threshold_ms'), 'g')} ms; its latencies (TTFT, E2E) include "
        f"client delay"
    )


def _status(manifest: dict) -> str:
    status = manifest.get("status", "unknown")
    return "killed" if status == "running" else status


def dumps(doc: dict[str, Any]) -> bytes:
    """summary.json's bytes. orjson: a long run's time series (a value per bucket and column, millions for days
    of 1 s buckets) takes the standard json module seconds to write."""
    import orjson

    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def write(doc: dict[str, Any], run_dir: str | Path) -> Path:
    """Write RUN/summary.json atomically."""
    path = Path(run_dir) / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(dumps(doc))
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """A summary.json written by kvbench (a gate baseline); ConfigError naming the file otherwise."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"{p}: not valid JSON ({str(e)[:120]})") from None
    if not isinstance(doc, dict) or doc.get("kvbench_summary") != SUMMARY_VERSION or "metrics" not in doc:
        raise ConfigError(f"{p}: not a kvbench summary.json (version {SUMMARY_VERSION})")
    metrics = doc["metrics"]
    if not isinstance(metrics, dict):
        raise ConfigError(f"{p}: metrics: expected an object of numbers, got {type(metrics).__name__}")
    for key, value in metrics.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{p}: metrics.{key}: expected a number or null, got {str(value)[:40]!r}")
    return doc


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"


def latency_table(m: dict[str, Any], title: str):
    from rich.table import Table

    stats = ("count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
    t = Table(title=title, title_justify="left")
    t.add_column("latency (ms)")
    for s in stats:
        t.add_column(s, justify="right")
    for key, label in _LABELS.items():
        if m.get(f"{key}.count"):
            t.add_row(label, *(_fmt(m.get(f"{key}.{s}")) for s in stats))
    return t


def totals_table(m: dict[str, Any], slo_ms: dict[str, float]):
    from rich.table import Table

    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_row(
        "requests",
        f"{m['requests']:,} ({m['finished']:,} finished, {m['errors']:,} errors, "
        f"{m['rejected']:,} rejected, {m['cancelled']:,} cancelled, {m['running']:,} still running)",
    )
    t.add_row("duration", f"{m['duration_s']:,.3f} s (first ARRIVE to last terminal event)")
    t.add_row(
        "throughput",
        f"{_fmt(m['request_throughput'])} req/s, {_fmt(m['output_token_throughput'])} output tok/s, "
        f"{_fmt(m['total_token_throughput'])} total tok/s",
    )
    slo = ", ".join(f"{k}≤{v:g} ms" for k, v in slo_ms.items()) or "none given (good = finished)"
    t.add_row("SLO", f"{slo}: attainment {_fmt(m['slo_attainment'])}, goodput {_fmt(m['goodput'])} req/s")
    t.add_row("prefix cache", f"hit ratio {_fmt(m['prefix_hit_ratio'])} (trace-implied {_fmt(m['trace_hit_ratio'])})")
    if m.get("input_len_delta.count"):
        t.add_row("input length", input_len_text(m))
    tiers = sorted(k for k in m if k.startswith("prefix_hit_ratio.tier."))
    if tiers:
        t.add_row("hits by tier", ", ".join(f"{k.removeprefix('prefix_hit_ratio.tier.')} {_fmt(m[k])}" for k in tiers))
    for k in sorted(k for k in m if k.startswith("failures.")):
        t.add_row(k, _fmt(m[k]))
    if m["kv_transfer.count"]:
        t.add_row(
            "KV transfers",
            f"{m['kv_transfer.count']:,}, {m['kv_transfer.bytes']:,} bytes, "
            f"{_fmt(m['kv_transfer.time_s'])} s, {_fmt(m['kv_transfer.ttft_share'])} of TTFT",
        )
    if m["preemptions"] or m["migrations"]:
        t.add_row("preemptions", f"{m['preemptions']:,} ({m['preempted']:,} requests), migrations {m['migrations']:,}")
    return t


def _signed(v: float) -> str:
    text = f"{int(v):+,}" if float(v).is_integer() else f"{v:+,.1f}"
    return text.replace("-", "−")


def input_len_text(m: dict[str, Any]) -> str:
    """Achieved (server prompt_tokens) vs intended prompt length, one line (sql/input_len.sql)."""
    return (
        f"achieved/intended {_fmt(m['input_len_ratio'])} over {m['input_len_delta.count']:,} requests, "
        f"achieved − intended p50 "
        f"{_signed(m['input_len_delta.p50'])} tokens (min {_signed(m['input_len_delta.min'])}, "
        f"max {_signed(m['input_len_delta.max'])})"
    )


_INSTANCE_COLUMNS = {
    "steps": "steps",
    "utilisation": "utilisation",
    "batch": "mean batch",
    "kv_occupancy": "KV occ. mean",
    "kv_occupancy_max": "KV occ. max",
    "prefix_hit_ratio": "prefix hit ratio",
    "trace_hit_ratio": "trace-implied",
}


def _natural(name: str) -> list:
    """Sort key putting decode-2 before decode-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def instance_rows(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-instance figures regrouped from summary.json's flat keys (instance.I.F, prefix_hit_ratio.instance.I,
    trace_hit_ratio.instance.I) as {instance: {figure: value}}, instances in natural order."""
    rows: dict[str, dict[str, Any]] = {}
    for k, v in m.items():
        if k.startswith("instance."):
            inst, field = k.removeprefix("instance.").rsplit(".", 1)
            rows.setdefault(inst, {})[field] = v
        elif k.startswith(("prefix_hit_ratio.instance.", "trace_hit_ratio.instance.")):
            field, _, inst = k.split(".", 2)
            rows.setdefault(inst, {})[field] = v
    return {inst: rows[inst] for inst in sorted(rows, key=_natural)}


def instances_table(m: dict[str, Any]):
    """One row per instance (steps, utilisation, batch, KV occupancy, hit ratios); None when the run has none.
    Columns no instance has (e.g. the step figures of a real endpoint) are left out."""
    from rich.table import Table

    rows = instance_rows(m)
    cols = [c for c in _INSTANCE_COLUMNS if any(c in r for r in rows.values())]
    if not rows:
        return None
    t = Table(title=f"per instance ({len(rows)})", title_justify="left")
    t.add_column("instance")
    for c in cols:
        t.add_column(_INSTANCE_COLUMNS[c], justify="right")
    for inst, r in rows.items():
        t.add_row(inst, *(_fmt(r.get(c)) for c in cols))
    return t


def print_summary(doc: dict[str, Any], file: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=file, width=max(120, Console(file=file).width))
    run = doc.get("run_id") or doc.get("run_dir")
    warning = client_lag_warning(doc.get("client_lag"), run)
    if warning:  # Text, not markup: the run name is the user's
        console.print(Text(f"warning: {warning}", style="bold yellow"), soft_wrap=True)  # one line, as logged
    title = f"run {run} ({doc.get('status')})"
    console.print(latency_table(doc["metrics"], title))
    console.print(totals_table(doc["metrics"], doc.get("slo_ms") or {}))
    instances = instances_table(doc["metrics"])
    if instances is not None:
        console.print(instances)


def print_run_summary(run_dir: str | Path, file: IO[str] | None = None) -> None:
    """Called after a replay: summary with the workload's SLOs, written to RUN/summary.json and printed."""
    try:
        doc = build(run_dir)
    except ConfigError as e:  # the replay itself is done; say why there is no summary rather than fail it
        print(f"kvbench: no summary: {e}", file=sys.stderr)
        return
    write(doc, run_dir)
    print_summary(doc, file)


def known_metrics() -> set[str]:
    """Metric keys every summary has (gate rules may name these; per-instance/tier/reason keys are dynamic)."""
    from kvbench.analysis.figures import COUNTS, NS_PER_S_RATES, STATS

    keys = {f"{k}.{s}" for k in LATENCIES for s in STATS} | set(COUNTS) | set(NS_PER_S_RATES.values())
    keys |= {
        "duration_s",
        "slo_attainment",
        "prefix_hit_ratio",
        "trace_hit_ratio",
        "kv_transfer.count",
        "kv_transfer.bytes",
        "kv_transfer.time_s",
        "kv_transfer.mean_ms",
        "kv_transfer.ttft_share",
        "input_len_ratio",
        "input_len_delta.count",
        "input_len_delta.p50",
        "input_len_delta.min",
        "input_len_delta.max",
    }
    return keys
