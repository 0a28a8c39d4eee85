"""The flat figure dict of one run (what summary.json holds), assembled from the SQL files' results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.analysis.metrics import LATENCIES, PERCENTILES, Slo, prepare, sql_text
from kvbench.units import NS_PER_S, ns_to_ms, ns_to_s

if TYPE_CHECKING:
    import duckdb
    import numpy

STATS = ("count", "mean") + tuple(name for name, _ in PERCENTILES) + ("max",)
NS_PER_S_RATES = {
    "finished_per_ns": "request_throughput",
    "output_tokens_per_ns": "output_token_throughput",
    "total_tokens_per_ns": "total_token_throughput",
    "good_per_ns": "goodput",
}
COUNTS = (
    "requests",
    "finished",
    "errors",
    "rejected",
    "cancelled",
    "running",
    "good",
    "one_token",
    "input_tokens",
    "output_tokens",
    "preemptions",
    "preempted",
    "migrations",
)


def weighted_quantiles(values: numpy.ndarray, weights: numpy.ndarray, ps: list[float]) -> list[float]:
    """Quantiles of `values` (sorted ascending) each repeated `weights` times, with numpy's linear method:
    equal to numpy.quantile(numpy.repeat(values, weights), ps) without building the repeated array."""
    import numpy as np

    cum = np.cumsum(weights)
    h = np.asarray(ps) * (cum[-1] - 1)
    lo, hi = np.floor(h), np.ceil(h)
    v_lo = values[np.searchsorted(cum, lo, side="right")]
    v_hi = values[np.searchsorted(cum, hi, side="right")]
    return list(v_lo + (h - lo) * (v_hi - v_lo))


def _latency(con: duckdb.DuckDBPyConnection, out: dict[str, Any]) -> None:
    row = con.execute(sql_text("latency")).fetchone()
    # latency.sql's columns follow LATENCIES' order (ttft, tpot, e2e, lag, tbt, queue): count, mean, q[], max each
    for i, key in enumerate(k for k, c in LATENCIES.items() if c is not None):
        count, mean, q, mx = row[1 + 4 * i : 5 + 4 * i] if row else (0, None, None, None)
        stats = [count, mean] + (list(q) if q else [None] * len(PERCENTILES)) + [mx]
        for stat, value in zip(STATS, stats):
            out[f"{key}.{stat}"] = value if stat == "count" or value is None else ns_to_ms(value)


def _itl(con: duckdb.DuckDBPyConnection, out: dict[str, Any]) -> None:
    data = con.execute(sql_text("itl")).fetchnumpy()
    values, weights = data["gap_ns"], data["n"]
    n = int(weights.sum()) if len(weights) else 0
    out["itl_ms.count"] = n
    if not n:
        out.update({f"itl_ms.{s}": None for s in STATS[1:]})
        return
    out["itl_ms.mean"] = ns_to_ms(float((values * weights).sum() / n))
    qs = weighted_quantiles(values, weights, [p for _, p in PERCENTILES])
    out.update({f"itl_ms.{name}": ns_to_ms(float(q)) for (name, _), q in zip(PERCENTILES, qs)})
    out["itl_ms.max"] = ns_to_ms(float(values[-1]))


def _totals(con: duckdb.DuckDBPyConnection, out: dict[str, Any]) -> int:
    cur = con.execute(sql_text("run_totals"))
    names = [d[0] for d in cur.description]
    row = cur.fetchone()
    t = dict(zip(names, row)) if row else {}
    for key in COUNTS:
        out[key] = int(t.get(key) or 0)
    out["duration_s"] = ns_to_s(t.get("duration_ns") or 0)
    for col, key in NS_PER_S_RATES.items():
        out[key] = None if t.get(col) is None else t[col] * NS_PER_S  # per ns -> per s
    out["slo_attainment"] = t.get("slo_attainment")
    out["prefix_hit_ratio"] = t.get("prefix_hit_ratio")
    out["trace_hit_ratio"] = t.get("trace_hit_ratio")
    return int(t.get("duration_ns") or 0)


def _input_len(con: duckdb.DuckDBPyConnection, out: dict[str, Any]) -> None:
    """Achieved (server-reported) vs intended prompt length; count 0 and None figures when no request has both."""
    row = con.execute(sql_text("input_len")).fetchone()
    count, ratio, p50, lo, hi = row[1:] if row else (0, None, None, None, None)
    out.update(
        {
            "input_len_delta.count": int(count),
            "input_len_ratio": ratio,
            "input_len_delta.p50": p50,
            "input_len_delta.min": lo,
            "input_len_delta.max": hi,
        }
    )


def _breakdowns(con: duckdb.DuckDBPyConnection, out: dict[str, Any], run: str | None, duration_ns: int) -> None:
    for _, status, reason, n in con.execute(sql_text("reasons")).fetchall():
        out[f"failures.{status}.{reason or 'unknown'}"] = n
    for _, tier, _, ratio in con.execute(sql_text("cache_tiers")).fetchall():
        out[f"prefix_hit_ratio.tier.{tier}"] = ratio
    for _, inst, _, ratio, trace in con.execute(sql_text("cache_instances")).fetchall():
        out[f"prefix_hit_ratio.instance.{inst}"] = ratio
        out[f"trace_hit_ratio.instance.{inst}"] = trace
    con.execute(f"CREATE OR REPLACE TEMP TABLE kv_transfers AS {sql_text('kv_transfers').rstrip().rstrip(';')}")
    kv = con.execute(sql_text("kv_totals")).fetchone()
    count, nbytes, dur, mean, _, share = kv[1:] if kv else (0, 0, 0, None, 0, None)
    out.update(
        {
            "kv_transfer.count": int(count),
            "kv_transfer.bytes": int(nbytes or 0),
            "kv_transfer.time_s": ns_to_s(dur or 0),
            "kv_transfer.mean_ms": None if mean is None else ns_to_ms(mean),
            "kv_transfer.ttft_share": share,
        }
    )
    rows = con.execute(sql_text("instance_totals"), {"run": run, "duration_ns": duration_ns}).fetchall()
    for _, inst, util, steps, batch, kv_mean, kv_max in rows:
        out.update(
            {
                f"instance.{inst}.utilisation": util,
                f"instance.{inst}.steps": int(steps),
                f"instance.{inst}.batch": batch,
                f"instance.{inst}.kv_occupancy": kv_mean,
                f"instance.{inst}.kv_occupancy_max": kv_max,
            }
        )


def figures(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> dict[str, Any]:
    """All figures of the single run open on `con` (see README section 'metrics' for each formula)."""
    prepare(con, slo)
    runs = [r[0] for r in con.execute("SELECT DISTINCT run FROM per_request").fetchall()]
    out: dict[str, Any] = {}
    duration_ns = _totals(con, out)
    _latency(con, out)
    _itl(con, out)
    _input_len(con, out)
    _breakdowns(con, out, runs[0] if runs else None, duration_ns)
    return {k: (float(v) if isinstance(v, float) else v) for k, v in out.items()}
