"""Metrics over the event log: every figure is one of the SQL files in kvbench/sql run by DuckDB over open runs."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis.runset import open_runs
from kvbench.config import ConfigError
from kvbench.units import ms_to_ns, ns_to_ms, ns_to_s, s_to_ns

if TYPE_CHECKING:
    import duckdb
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
    "LATENCIES",
]

SQL_DIR = Path(__file__).with_name("sql")
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
# summary key prefix -> per_request column (ns); ITL is pooled over gaps, not per request
LATENCIES = {
    "ttft_ms": "ttft_ns",
    "tpot_ms": "tpot_ns",
    "itl_ms": None,
    "e2e_ms": "e2e_ns",
    "client_lag_ms": "lag_ns",
    "tbt_ms": "tbt_ns",
    "queue_ms": "queue_ns",
}
_SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms", "tbt": "tbt_ms"}


@dataclass(frozen=True)
class Slo:
    """Per-request SLO thresholds in ms (None: not checked). vLLM's keys ttft, tpot, e2el plus Mooncake's tbt."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    tbt_ms: float | None = None

    def params(self) -> dict[str, int | None]:
        """Bound parameters of per_request.sql ($ttft_ns, $tpot_ns, $e2el_ns, $tbt_ns)."""
        return {
            f"{k}_ns": None if getattr(self, v) is None else ms_to_ns(getattr(self, v)) for k, v in _SLO_KEYS.items()
        }

    def as_ms(self) -> dict[str, float]:
        return {k: getattr(self, v) for k, v in _SLO_KEYS.items() if getattr(self, v) is not None}

    def __bool__(self) -> bool:
        return any(v is not None for v in asdict(self).values())


MAX_SLO_MS = 1e9  # about 11.6 days: larger thresholds are unit mix-ups


def parse_slo(text: str) -> Slo:
    """'ttft=200,tpot=50' -> Slo(ttft_ms=200, tpot_ms=50). Keys ttft, tpot, e2el, tbt; values in ms (also 'ttft:200')."""
    values: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([a-z0-9_]+)\s*[=:]\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ms)?", item.lower())
        if not m:
            raise ConfigError(f"--slo {text!r}: cannot parse {item!r}; expected KEY=MS, e.g. ttft=200,tpot=50")
        key = m.group(1).removesuffix("_ms")
        if key not in _SLO_KEYS:
            raise ConfigError(f"--slo {text!r}: unknown key {key!r}; allowed: {', '.join(_SLO_KEYS)}")
        if key in values:
            raise ConfigError(f"--slo {text!r}: {key!r} given twice")
        value = float(m.group(2))
        if not 0 < value <= MAX_SLO_MS:
            raise ConfigError(
                f"--slo {text!r}: {key}: expected milliseconds > 0 and <= {MAX_SLO_MS:g}, got {m.group(2)}"
            )
        values[key] = value
    if not values:
        raise ConfigError(f"--slo {text!r}: no threshold given; expected KEY=MS, e.g. ttft=200,tpot=50")
    return Slo(**{_SLO_KEYS[k]: v for k, v in values.items()})


def slo_from_ms(declared: dict[str, Any] | None) -> Slo:
    """An Slo from {"ttft": ms, ...} (run.json workload.slo_ms, summary.json slo_ms); unknown keys are ignored."""
    declared = declared or {}
    return Slo(**{_SLO_KEYS[k]: float(v) for k, v in declared.items() if k in _SLO_KEYS and v is not None})


def slo_from_manifest(manifest: dict) -> Slo:
    """SLOs the run's workload declared (run.json workload.slo_ms)."""
    return slo_from_ms((manifest.get("workload") or {}).get("slo_ms"))


def sql_text(name: str) -> str:
    """The text of kvbench/sql/<name>.sql (formulas in its header comment)."""
    return (SQL_DIR / f"{name}.sql").read_text()


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(
        con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [name]).fetchone()[0]
    )


def prepare(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> None:
    """Build the temp tables request_events, event_gaps, step_* (stepgaps.py), tbt and the view token_gaps (once)
    and the table per_request (again when the SLO changes)."""
    from kvbench.analysis import stepgaps

    slo = slo or Slo()
    if not _has_table(con, "tbt"):
        con.execute(sql_text("request_events"))
        con.execute(sql_text("event_gaps"))
        stepgaps.build(con)
        con.execute(sql_text("token_gaps"))
        con.execute(sql_text("tbt"))
    key = repr(slo)
    if (
        _has_table(con, "per_request")
        and _has_table(con, "kvbench_slo")
        and con.execute("SELECT key FROM kvbench_slo").fetchone()[0] == key
    ):
        return
    con.execute(sql_text("per_request"), slo.params())
    con.execute("CREATE OR REPLACE TEMP TABLE kvbench_slo AS SELECT ?::VARCHAR AS key", [key])


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
    query = sql_text("kv_transfers").rstrip().rstrip(";")
    return con.execute(f"SELECT * FROM ({query}) ORDER BY run, start_ns, req_id").df()


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


def _bucket_ns(bucket_s: float) -> int:
    if not bucket_s > 0:
        raise ConfigError(f"--bucket must be > 0 seconds, got {bucket_s}")
    return s_to_ns(bucket_s)


def summary(run_dir: str | Path, slo: Slo | None = None) -> dict[str, Any]:
    """The figures of one run as a flat dict with stable keys ("ttft_ms.p99", "slo_attainment", ...)."""
    from kvbench.analysis.figures import figures

    con = open_runs([run_dir])
    try:
        return figures(con, slo)
    finally:
        con.close()
