"""One run's data for the report, read on one DuckDB connection: figures, bootstrap samples, latency CDF quantiles,
time buckets, instance load, samples of requests and KV transfers, token counts, server metrics and the failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis import metrics
from kvbench.analysis.bootstrap import samples
from kvbench.analysis.catalogue import by_key
from kvbench.analysis.figures import figures
from kvbench.analysis.runset import check_run, open_runs
from kvbench.analysis.slo import Slo, slo_from_manifest
from kvbench.analysis.tables import build_kv_transfers
from kvbench.units import ns_to_ms, ns_to_s

if TYPE_CHECKING:
    import duckdb
    import numpy
    import pandas

CDF_POINTS = 400  # quantiles per latency CDF: smooth to the eye at any run size
KV_SAMPLE = 4_000  # KV transfers drawn per run
REQUEST_SAMPLE = 4_000  # requests drawn per run for the per-request scatter figures
FAILURE_ROWS = 20  # distinct (kind, detail) rows of the failures table
CDF_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")  # catalogue keys of the latencies drawn as CDFs


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
    samples: dict = field(default_factory=dict)  # bootstrap samples (kvbench.analysis.bootstrap.samples)
    requests: Any = None  # DataFrame run, input_tokens, output_tokens, cached_tokens, ttft_ms (sample) or None
    server: Any = None  # DataFrame run, t_s, name, labels, value (scraped server metrics) or None


def _cdf(con: duckdb.DuckDBPyConnection, name: str) -> pandas.DataFrame | None:
    """CDF_POINTS quantiles of each latency over finished requests (columns run, metric label, value_ms). The
    columns are fetched once and sorted by numpy: several times faster than DuckDB's quantile_cont with a list of
    400 fractions."""
    import numpy as np
    import pandas as pd

    drawn = [by_key(k) for k in CDF_METRICS]
    cols = con.execute(f"SELECT {', '.join(m.column for m in drawn)} FROM per_request WHERE status = 'FINISH'")
    data = cols.fetchnumpy()
    ps = np.linspace(0, 1, CDF_POINTS)
    frames = []
    for m in drawn:
        values: numpy.ndarray = np.ma.compressed(np.ma.masked_invalid(np.ma.asarray(data[m.column], dtype=float)))
        if len(values):
            frames.append(pd.DataFrame({"run": name, "metric": m.label, "value_ms": ns_to_ms(np.quantile(values, ps))}))
    return pd.concat(frames, ignore_index=True) if frames else None


def _kv_sample(con: duckdb.DuckDBPyConnection, name: str) -> pandas.DataFrame | None:
    """Up to KV_SAMPLE transfers (nbytes, time_ms); hash() is deterministic, so a run always gives one sample."""
    build_kv_transfers(con)
    df = con.execute(
        "SELECT nbytes, duration_ns FROM kv_transfers WHERE duration_ns > 0 AND nbytes > 0 "
        "ORDER BY hash(req_id, start_ns) LIMIT ?",
        [KV_SAMPLE],
    ).df()
    if df.empty:
        return None
    df.insert(0, "run", name)
    df["time_ms"] = ns_to_ms(df.pop("duration_ns"))
    return df


def _requests(con: duckdb.DuckDBPyConnection, name: str) -> pandas.DataFrame | None:
    """Up to REQUEST_SAMPLE finished requests (a deterministic sample): token counts and TTFT."""
    df = con.execute(
        "SELECT input_tokens, output_tokens, coalesce(cached_tokens, 0) AS cached_tokens, ttft_ns FROM per_request "
        "WHERE status = 'FINISH' ORDER BY hash(req_id) LIMIT ?",
        [REQUEST_SAMPLE],
    ).df()
    if df.empty:
        return None
    df.insert(0, "run", name)
    df["ttft_ms"] = ns_to_ms(df.pop("ttft_ns").astype(float))
    return df


def _server(con: duckdb.DuckDBPyConnection, name: str) -> pandas.DataFrame | None:
    """The scraped Prometheus samples (server_metrics table), times in seconds since the run's start."""
    df = con.execute("SELECT t_ns, name, labels, value FROM server_metrics ORDER BY name, labels, t_ns").df()
    if df.empty:
        return None
    df.insert(0, "run", name)
    df["t_s"] = ns_to_s(df.pop("t_ns").astype(float))
    return df


def _failures(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, int]]:
    return con.execute(
        "SELECT CAST(kind AS VARCHAR), coalesce(detail, ''), count(*) AS n FROM events "
        "WHERE kind IN ('ERROR', 'REJECT', 'CANCEL') GROUP BY ALL ORDER BY n DESC, 1, 2 LIMIT ?",
        [FAILURE_ROWS],
    ).fetchall()


def collect_run(run_dir: Path, name: str, slo: Slo | None, bucket_s: float) -> RunData:
    """One connection per run: the SQL views are prepared once and every figure reads the same temp tables."""
    manifest = check_run(run_dir)
    slo = slo if slo is not None else slo_from_manifest(manifest)
    con = open_runs([run_dir])
    con.execute("SET enable_progress_bar = false")  # stdout is the user's; rich shows progress
    try:
        summary = figures(con, slo)  # also builds per_request and the kv_transfers temp table
        ts = metrics.timeseries(con, bucket_s, slo)
        has_steps = bool(con.execute("SELECT 1 FROM steps LIMIT 1").fetchall())
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
            samples(con, seed=int(manifest.get("seed") or 0)),  # summary.json's, as compare uses
            _requests(con, name),
            _server(con, name),
        )
    finally:
        con.close()
    for frame in (data.timeseries, data.load):
        if frame is not None:  # the connection named the run by its directory; two runs may share that name
            frame["run"] = name
            frame["t_s"] = ns_to_s(frame["t_ns"])
    return data
