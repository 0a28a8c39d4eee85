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
    import numpy as np  # loaded already by the event log of a real-time run

    p50, p99 = np.quantile(lags_ns, [0.5, 0.99])  # linear between ranks, as DuckDB's quantile_cont
    p99_ms = ns_to_ms(float(p99))
    lag = {
        "requests": len(lags_ns),
        "p50_ms": round(ns_to_ms(float(p50)), 3),
        "p99_ms": round(p99_ms, 3),
        "max_ms": round(ns_to_ms(max(lags_ns)), 3),
        "threshold_ms": threshold_ms,
        "behind": bool(p99_ms > threshold_ms),
    }
    if lag["behind"]:
        lag["warning"] = (
            f"client fell behind the schedule: send lag p99 {lag['p99_ms']:.1f} ms > "
            f"{threshold_ms:g} ms; measured latencies include client delay (use --workers N, "
            f"lower the rate, or raise lag_warn_ms)"
        )
        print(f"kvbench: warning: {lag['warning']}", file=sys.stderr)
    return {"client_lag": lag}
