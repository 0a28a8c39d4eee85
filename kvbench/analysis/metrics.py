"""Metrics over the event log, the Python API: every figure is SQL (kvbench/analysis/sql) run by DuckDB over open
runs; per-request rows, time buckets, gaps and transfers as DataFrames, the run's flat figures as a dict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.analysis.catalogue import PERCENTILES
from kvbench.analysis.figures import summary
from kvbench.analysis.runset import open_runs
from kvbench.analysis.slo import Slo, parse_slo, slo_from_manifest, slo_from_ms
from kvbench.analysis.sqlfiles import sql_text
from kvbench.analysis.tables import build_kv_transfers, prepare
from kvbench.config import ConfigError
from kvbench.units import ns_to_ms, ns_to_s, s_to_ns

if TYPE_CHECKING:
    import duckdb
    import numpy
    import pandas

__all__ = [
    "Slo",
    "parse_slo",
    "slo_from_ms",
    "slo_from_manifest",
    "open_runs",
    "prepare",
    "per_request",
    "summary",
    "timeseries",
    "itl_gaps",
    "instance_load",
    "kv_transfers",
    "sql_text",
    "PERCENTILES",
]


def per_request(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> pandas.DataFrame:
    """One row per request: times (ns), status, reason, token counts, ttft/tpot/e2e/lag/tbt/queue (ns), good."""
    prepare(con, slo)
    return con.execute("SELECT * FROM per_request ORDER BY run, arrival_ns, req_id").df()


def itl_gaps(con: duckdb.DuckDBPyConnection) -> pandas.DataFrame:
    """Pooled inter-token gaps of finished requests: columns run, gap_ns, n (n gaps of that length)."""
    prepare(con)
    return con.execute(sql_text("itl")).df()


def kv_transfers(con: duckdb.DuckDBPyConnection) -> pandas.DataFrame:
    """One row per KV transfer: run, req_id, instance, tier, nbytes, start_ns, end_ns, duration_ns, in_ttft_ns."""
    prepare(con)
    build_kv_transfers(con)
    return con.execute("SELECT * FROM kv_transfers ORDER BY run, start_ns, req_id").df()


def instance_load(con: duckdb.DuckDBPyConnection, bucket_s: float = 1.0) -> pandas.DataFrame:
    """Per instance and bucket (sim steps): utilisation, batch, kv_occupancy, steps."""
    return con.execute(sql_text("instance_load"), {"bucket_ns": _bucket_ns(bucket_s)}).df()


def timeseries(con: duckdb.DuckDBPyConnection, bucket_s: float = 1.0, slo: Slo | None = None) -> pandas.DataFrame:
    """Per run and bucket: arrivals, finished, errors, in_flight, output tokens and tok/s, TTFT/TPOT p50/p99 (ms),
    good, hit_ratio vs trace_hit_ratio (see sql/timeseries.sql)."""
    prepare(con, slo)
    df = con.execute(sql_text("timeseries"), {"bucket_ns": _bucket_ns(bucket_s)}).df()
    df["t_s"] = ns_to_s(df["t_ns"])
    df["output_tok_s"] = df["output_tokens"] / bucket_s
    for col in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
        df[f"{col}_ms"] = ns_to_ms(df.pop(f"{col}_ns"))
    return df


def timeseries_columns(
    con: duckdb.DuckDBPyConnection, bucket_s: float = 1.0, slo: Slo | None = None
) -> dict[str, numpy.ndarray]:
    """sql/timeseries.sql's columns as numpy arrays (masked where NULL), times in ns: no pandas."""
    prepare(con, slo)
    return con.execute(sql_text("timeseries"), {"bucket_ns": _bucket_ns(bucket_s)}).fetchnumpy()


def _bucket_ns(bucket_s: float) -> int:
    if not bucket_s > 0:
        raise ConfigError(f"--bucket must be > 0 seconds, got {bucket_s}")
    return s_to_ns(bucket_s)
