"""Client lag check after a real-time run: send − intended arrival per request, flagged when p99 is too high."""

from __future__ import annotations

import sys

from kvbench.units import ns_to_ms

DEFAULT_LAG_WARN_MS = 10.0


def client_lag(lags_ns: list[int], params: dict) -> dict:
    """{"client_lag": {...}} for run.json from the run's SEND − ARRIVE per sent request (ReplayStats.send_lags_ns);
    prints a warning to stderr when p99 lag exceeds `lag_warn_ms`."""
    threshold_ms = params.get("lag_warn_ms", DEFAULT_LAG_WARN_MS)
    if not lags_ns:
        return {"client_lag": {"requests": 0}}
    lags = sorted(lags_ns)
    p99_ms = ns_to_ms(quantile_cont(lags, 0.99))
    lag = {"requests": len(lags), "p50_ms": round(ns_to_ms(quantile_cont(lags, 0.5)), 3), "p99_ms": round(p99_ms, 3),
           "max_ms": round(ns_to_ms(lags[-1]), 3), "threshold_ms": threshold_ms, "behind": bool(p99_ms > threshold_ms)}
    if lag["behind"]:
        lag["warning"] = (f"client fell behind the schedule: send lag p99 {lag['p99_ms']:.1f} ms > "
                          f"{threshold_ms:g} ms; measured latencies include client delay (use --workers N, "
                          f"lower the rate, or raise lag_warn_ms)")
        print(f"kvbench: warning: {lag['warning']}", file=sys.stderr)
    return {"client_lag": lag}


def quantile_cont(sorted_values: list[int], q: float) -> float:
    """The q-quantile interpolated linearly between the closest ranks: DuckDB's quantile_cont, numpy's default."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
