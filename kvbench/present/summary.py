"""`kvbench summary`: compute a run's figures, write RUN/summary.json and print them as rich tables."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kvbench.analysis import cache, catalogue
from kvbench.analysis.bootstrap import samples
from kvbench.analysis.catalogue import STATS, Metric
from kvbench.analysis.figures import figures
from kvbench.analysis.metrics import timeseries_columns
from kvbench.analysis.rates import Rates, rate_warning, rates_of
from kvbench.analysis.runset import check_run, open_runs
from kvbench.analysis.slo import Slo, slo_from_manifest
from kvbench.analysis.tables import prepare, side_connection
from kvbench.config import ConfigError
from kvbench.present import fmt
from kvbench.units import ns_to_ms, ns_to_s, s_to_ns
from kvbench.workload.tokens import tokens_label

if TYPE_CHECKING:
    import duckdb
    from rich.table import Table

SUMMARY_VERSION = 1


# DuckDB's memory for a summary: past it, temp tables (per_request, ~1 KB a request with its inputs) spill to a
# private temp directory, so a million-request run is summarised within ~1 GB of RSS, also at the end of a replay
# whose process still holds the simulator's leftovers (Python's share included)
MEMORY_LIMIT = "400MB"


def build(
    run_dir: str | Path, slo: Slo | None = None, bucket_s: float = 1.0, cache_from: int = cache.MIN_LOG_BYTES
) -> dict[str, Any]:
    """The summary.json document: run identity, SLOs used, flat figures, bootstrap samples, time buckets.
    A run whose event log holds at least `cache_from` bytes keeps its derived tables in RUN/.cache (cache.py)."""
    run_dir = Path(run_dir)
    manifest = check_run(run_dir)
    slo = slo if slo is not None else slo_from_manifest(manifest)
    with tempfile.TemporaryDirectory(prefix="kvbench-summary-") as spill:
        con = open_runs([run_dir])
        try:
            cache.enable(con, run_dir, cache_from)
            con.execute("SET temp_directory = ?", [spill])
            con.execute("SET memory_limit = ?", [MEMORY_LIMIT])
            return _document(con, manifest, run_dir, slo, bucket_s)
        finally:
            con.close()


def _document(
    con: duckdb.DuckDBPyConnection, manifest: dict[str, Any], run_dir: Path, slo: Slo, bucket_s: float
) -> dict[str, Any]:
    prepare(con, slo, transfers=True)
    side = side_connection(con, slo)  # the samples and time series beside the figures, when both can read the cache
    try:
        with ThreadPoolExecutor(1) as pool:
            later = pool.submit(_samples_and_series, side, manifest, bucket_s, slo) if side else None
            figs = figures(con, slo)
            sampled, series = later.result() if later else _samples_and_series(con, manifest, bucket_s, slo)
    finally:
        if side:
            side.close()
    lag = {"client_lag": manifest["client_lag"]} if "client_lag" in manifest else {}  # real endpoints only
    tokens = tokens_label((manifest.get("workload") or {}).get("tokens"))
    return {
        "kvbench_summary": SUMMARY_VERSION,
        "run_id": manifest.get("run_id"),
        "run_dir": str(run_dir),
        "status": _status(manifest),
        **lag,
        **({"token_counts": tokens} if tokens else {}),
        "slo_ms": slo.as_ms(),
        "rates": rates_doc(rates_of(manifest, figs)),
        "metrics": figs,
        "samples": sampled,
        "timeseries": series,
    }


def _samples_and_series(
    con: duckdb.DuckDBPyConnection, manifest: dict[str, Any], bucket_s: float, slo: Slo
) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary.json's bootstrap samples and time series."""
    return samples(con, seed=int(manifest.get("seed") or 0)), _timeseries(con, bucket_s, slo)


MAX_BUCKETS = 3_600  # summary.json's time series: past this many buckets of the asked width, wider ones


def series_bucket_s(con: duckdb.DuckDBPyConnection, bucket_s: float) -> float:
    """summary.json's bucket width: `bucket_s`, or the smallest whole multiple of it that cuts the run into at most
    MAX_BUCKETS (a day of 1 s buckets: 86,400 values a column and seconds of work); metrics.timeseries takes any."""
    t0, t1 = con.execute(
        "SELECT min(arrival_ns), greatest(max(arrival_ns), max(end_ns)) FROM per_request WHERE NOT interrupted_unsent"
    ).fetchall()[0]
    width = s_to_ns(bucket_s) if bucket_s > 0 else 0
    if t0 is None or width <= 0:
        return bucket_s  # an empty run, or a width timeseries_columns refuses
    k = 1
    while t1 // (k * width) - t0 // (k * width) + 1 > MAX_BUCKETS:
        k = max(k + 1, (t1 - t0) // (width * MAX_BUCKETS))
    return bucket_s * k


def _timeseries(con: duckdb.DuckDBPyConnection, bucket_s: float, slo: Slo) -> dict[str, Any]:
    width = series_bucket_s(con, bucket_s)
    return {"bucket_s": width, **_series(con, width, slo)}


SERIES = (  # summary.json's time series: timeseries.sql's columns, times and latencies in s and ms
    *("t_s", "arrivals", "finished", "errors", "in_flight", "output_tok_s", "good"),
    *("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "hit_ratio", "trace_hit_ratio"),
)


def _series(con: duckdb.DuckDBPyConnection, bucket_s: float, slo: Slo) -> dict[str, list[float | None]]:
    """The SERIES columns of analysis.metrics.timeseries as float lists (None for NULL), read as numpy columns:
    a DataFrame would import pandas for a handful of columns."""
    import numpy as np

    cols: dict[str, Any] = dict(timeseries_columns(con, bucket_s, slo))

    def floats(c: str) -> Any:  # NULL as NaN; Any: units.py's functions take arrays too
        return np.ma.asarray(cols[c], dtype=float).filled(np.nan)

    cols["t_s"] = ns_to_s(floats("t_ns"))
    cols["output_tok_s"] = floats("output_tokens") / bucket_s
    for c in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
        cols[f"{c}_ms"] = ns_to_ms(floats(f"{c}_ns"))
    return {c: [None if v != v else v for v in floats(c).tolist()] for c in SERIES}


def client_lag_warning(client_lag: Any, run: Any) -> str | None:
    """One line when run.json's client_lag says the client fell behind (behind is true), else None."""
    if not isinstance(client_lag, dict) or client_lag.get("behind") is not True:
        return None
    p99, threshold = fmt.number(client_lag.get("p99_ms"), fmt.ONE_DECIMAL), fmt.short(client_lag.get("threshold_ms"))
    what = (
        "the client was slow to refill freed slots: slot-free-to-send"
        if client_lag.get("mode") == "closed-loop"
        else "the client fell behind the schedule: send"
    )
    return (
        f"run {run}: {what} lag p99 {p99} ms > threshold {threshold} ms; its latencies (TTFT, E2E) include client delay"
    )


def rates_doc(r: Rates) -> dict[str, Any]:
    """summary.json's "rates": achieved and nominal arrival rates (req/s), where the nominal one came from."""
    return {
        "achieved_per_s": r.achieved,
        "nominal_per_s": r.nominal,
        "nominal_source": r.source,
        "scheduled_per_s": r.scheduled,
        "gap": r.gap,
    }


def rates_from_doc(doc: dict[str, Any]) -> Rates | None:
    """The Rates of a summary document (None for one written before rates were recorded)."""
    d = doc.get("rates")
    if not isinstance(d, dict):
        return None
    return Rates(d.get("achieved_per_s"), d.get("nominal_per_s"), d.get("scheduled_per_s"), d.get("nominal_source", ""))


def rates_text(r: Rates) -> str:
    """'13.48 req/s achieved, nominal 40 req/s (asked; −66 %), scheduled 39.03 req/s'."""
    num = fmt.number
    gap = "" if r.gap is None else f"; {fmt.signed(round(100 * r.gap, 1))} %"
    text = f"{num(r.achieved)} req/s achieved, nominal {num(r.nominal)} req/s ({r.source}{gap})"
    return text + (f", scheduled {num(r.scheduled)} req/s" if r.source != "schedule" else "")


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
    try:
        tmp.write_bytes(dumps(doc))
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return path


def save(doc: dict[str, Any], run_dir: str | Path) -> Path | None:
    """`write`, or when the file system refuses (disk full, read-only, no permission) one warning line on stderr
    and None: the figures are computed and can still be printed."""
    try:
        return write(doc, run_dir)
    except OSError as e:
        where = Path(run_dir) / "summary.json"
        print(f"kvbench: warning: cannot write {where} ({e.strerror or e}); printing only", file=sys.stderr)
        return None


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


def _label(m: Metric) -> str:
    return f"{m.label} ({m.note})" if m.note else m.label


def latency_table(m: dict[str, Any], title: str) -> Table:
    """One row per distribution in the catalogue that has values: count, mean, percentiles, max (ms)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("latency (ms)")
    for s in STATS:
        t.add_column(s, justify="right")
    for metric in catalogue.distributions():
        if m.get(f"{metric.key}.count") and not (metric.key == "client_lag_ms" and not m.get("client_lag_ms.max")):
            t.add_row(_label(metric), *(fmt.number(m.get(f"{metric.key}.{s}")) for s in STATS))
    return t


def totals_table(m: dict[str, Any], slo_ms: dict[str, float], rates: Rates | None = None) -> Table:
    """Counts, duration, arrival rates, throughput, SLO, cache, input length, failures, KV transfers and
    preemptions as lines."""
    from rich.table import Table

    n, num = fmt.count, fmt.number
    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_row(
        "requests",
        f"{n(m['requests'])} ({n(m['finished'])} finished, {n(m['errors'])} errors, "
        f"{n(m['rejected'])} rejected, {n(m['cancelled'])} cancelled, {n(m['running'])} still running)",
    )
    t.add_row("duration", f"{num(m['duration_s'], fmt.DECIMALS)} s (first ARRIVE to last terminal event)")
    if rates is not None:
        t.add_row("arrival rate", rates_text(rates))
    t.add_row(
        "throughput",
        f"{num(m['request_throughput'])} req/s, {num(m['output_token_throughput'])} output tok/s, "
        f"{num(m['total_token_throughput'])} total tok/s",
    )
    slo = fmt.limits(slo_ms, unit=" ms") or "none given (good = finished)"
    parts = ", ".join(f"{s.label.rsplit(' ', 1)[-1]} {num(m[s.key])}" for s in slo_parts() if m.get(s.key) is not None)
    parts = f" ({parts})" if parts else ""
    t.add_row("SLO", f"{slo}: attainment {num(m['slo_attainment'])}{parts}, goodput {num(m['goodput'])} req/s")
    t.add_row("prefix cache", f"hit ratio {num(m['prefix_hit_ratio'])} (trace-implied {num(m['trace_hit_ratio'])})")
    if m.get("input_len_delta.count"):
        t.add_row("input length", input_len_text(m))
    for label, values in _per_row_lines(m):
        t.add_row(label, values)
    if m["kv_transfer.count"]:
        t.add_row(
            "KV transfers",
            f"{n(m['kv_transfer.count'])}, {fmt.nbytes(m['kv_transfer.bytes'])}, "
            f"{num(m['kv_transfer.time_s'])} s, {num(m['kv_transfer.ttft_share'])} of TTFT",
        )
    if m["preemptions"] or m["migrations"]:
        t.add_row(
            "preemptions", f"{n(m['preemptions'])} ({n(m['preempted'])} requests), migrations {n(m['migrations'])}"
        )
    return t


def slo_parts() -> list[Metric]:
    """The catalogue's per-SLO attainments (slo_parts.sql), TTFT first."""
    return [x for x in catalogue.CATALOGUE if x.sql == "slo_parts" and x.uses_slo]


def _per_row_lines(m: dict[str, Any]) -> list[tuple[str, str]]:
    """Hits by tier on one line ('dram 0.167, hbm 0.250'), then a line per failure key."""
    tier = catalogue.by_key("prefix_hit_ratio.tier.{tier}")
    tiers = sorted((fields["tier"], k) for k, fields in _matches(m, tier))
    lines = [(tier.label, ", ".join(f"{name} {fmt.number(m[k])}" for name, k in tiers))] if tiers else []
    failures = catalogue.by_key("failures.{status}.{reason}")
    return lines + [(k, fmt.number(m[k])) for k in sorted(k for k, _ in _matches(m, failures))]


def _matches(m: dict[str, Any], metric: Metric) -> list[tuple[str, dict[str, str]]]:
    """The keys of `m` a PER_ROW metric made, with their placeholders' values."""
    pattern = metric.pattern()
    return [(k, match.groupdict()) for k in m if (match := pattern.fullmatch(k))]


def input_len_text(m: dict[str, Any]) -> str:
    """Achieved (server prompt_tokens) vs intended prompt length, one line (sql/input_len.sql)."""
    return (
        f"achieved/intended {fmt.number(m['input_len_ratio'])} over {fmt.count(m['input_len_delta.count'])} "
        f"requests, achieved − intended p50 {fmt.signed(m['input_len_delta.p50'])} tokens "
        f"(min {fmt.signed(m['input_len_delta.min'])}, max {fmt.signed(m['input_len_delta.max'])})"
    )


def _natural(name: str) -> list:
    """Sort key putting decode-2 before decode-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _instance_metrics() -> list[Metric]:
    """The catalogue's per-instance figures (keys with an {instance} placeholder), in catalogue order."""
    return [x for x in catalogue.per_row() if "{instance}" in x.key]


def instance_rows(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-instance figures regrouped from summary.json's flat keys (instance.I.utilisation,
    prefix_hit_ratio.instance.I, ...) as {instance: {catalogue key: value}}, instances in natural order."""
    rows: dict[str, dict[str, Any]] = {}
    for metric in _instance_metrics():
        for k, fields in _matches(m, metric):
            rows.setdefault(fields["instance"], {})[metric.key] = m[k]
    return {inst: rows[inst] for inst in sorted(rows, key=_natural)}


def instances_table(m: dict[str, Any]) -> Table | None:
    """One row per instance (steps, utilisation, batch, KV occupancy, hit ratios); None when the run has none.
    Columns no instance has (e.g. the step figures of a real endpoint) are left out."""
    from rich.table import Table

    rows = instance_rows(m)
    if not rows:
        return None
    cols = [c for c in _instance_metrics() if any(c.key in r for r in rows.values())]
    t = Table(title=f"per instance ({len(rows)})", title_justify="left")
    t.add_column("instance")
    for c in cols:
        t.add_column(c.label, justify="right")
    for inst, r in rows.items():
        t.add_row(inst, *(fmt.number(r.get(c.key)) for c in cols))
    return t


def print_summary(doc: dict[str, Any], file: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=file, width=max(120, Console(file=file).width))
    run = doc.get("run_id") or doc.get("run_dir")
    rates = rates_from_doc(doc)
    rate_note = rate_warning(rates) if rates is not None else None
    for warning in (client_lag_warning(doc.get("client_lag"), run), rate_note and f"run {run}: {rate_note}"):
        if warning:  # Text, not markup: the run name is the user's
            console.print(Text(f"warning: {warning}", style="bold yellow"), soft_wrap=True)  # one line, as logged
    title = f"run {run} ({doc.get('status')})"
    if doc.get("token_counts"):
        console.print(Text(f"token counts: {doc['token_counts']}"), soft_wrap=True)
    console.print(latency_table(doc["metrics"], title))
    console.print(totals_table(doc["metrics"], doc.get("slo_ms") or {}, rates))
    instances = instances_table(doc["metrics"])
    if instances is not None:
        console.print(instances)


def _release_heap() -> None:
    """Return the replay's freed heap to the system before DuckDB, which has its own allocator, takes memory for
    the summary: the process's peak is then the summary's, not the summary's on top of the replay's."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def print_run_summary(run_dir: str | Path, file: IO[str] | None = None) -> None:
    """Called after a replay: summary with the workload's SLOs, written to RUN/summary.json and printed."""
    _release_heap()
    try:
        doc = build(run_dir)
    except ConfigError as e:  # the replay itself is done; say why there is no summary rather than fail it
        print(f"kvbench: no summary: {e}", file=sys.stderr)
        return
    save(doc, run_dir)
    print_summary(doc, file)
