"""Client lag check after a real-time run: send − intended arrival per request, flagged when p99 is too high.

Open loop, a request's intended arrival is its scheduled time. Closed loop, it is the moment a user's slot freed
(its previous answer ended, plus think time), so the lag is the client's refill delay, which is what the check
judges. The opening requests of a closed loop (all due at t = 0) leave together and queue behind each other's
connection set-up: they are reported apart (`opening`) and not judged.
"""

from __future__ import annotations

import sys

from kvbench.units import ns_to_ms

DEFAULT_LAG_WARN_MS = 10.0


def _stats(lags_ns: list[int]) -> dict:
    import numpy as np  # loaded already by the event log of a real-time run

    p50, p99 = np.quantile(lags_ns, [0.5, 0.99])  # linear between ranks, as DuckDB's quantile_cont
    return {
        "requests": len(lags_ns),
        "p50_ms": round(ns_to_ms(float(p50)), 3),
        "p99_ms": round(ns_to_ms(float(p99)), 3),
        "max_ms": round(ns_to_ms(max(lags_ns)), 3),
    }


def client_lag(lags_ns: list[int], params: dict, opening_ns: list[int] | None = None) -> dict:
    """{"client_lag": {...}} for run.json from the run's SEND − ARRIVE per sent request (ReplayStats.send_lags_ns);
    prints a warning to stderr when p99 lag exceeds `lag_warn_ms`. `opening_ns`: a closed loop's opening requests
    (None for an open-loop run)."""
    threshold_ms = params.get("lag_warn_ms", DEFAULT_LAG_WARN_MS)
    closed = opening_ns is not None
    extra: dict = {"mode": "closed-loop"} if closed else {}
    if opening_ns:
        extra["opening"] = _stats(opening_ns)
    if not lags_ns:
        return {"client_lag": {"requests": 0, **extra}}
    lag = {**_stats(lags_ns), "threshold_ms": threshold_ms, **extra}
    lag["behind"] = bool(lag["p99_ms"] > threshold_ms)
    if lag["behind"]:
        what = "was slow to refill freed slots: slot-free-to-send" if closed else "fell behind the schedule: send"
        lag["warning"] = (
            f"client {what} lag p99 {lag['p99_ms']:.1f} ms > "
            f"{threshold_ms:g} ms; measured latencies include client delay (use --workers N, "
            f"lower the rate, or raise lag_warn_ms)"
        )
        print(f"kvbench: warning: {lag['warning']}", file=sys.stderr)
    return {"client_lag": lag}
