"""Client lag check after a real-time run: send − intended arrival per request, flagged when p99 is too high."""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.eventlog import table_glob
from kvbench.units import ns_to_ms

DEFAULT_LAG_WARN_MS = 10.0


def client_lag(run_dir: str | Path, params: dict) -> dict:
    """{"client_lag": {...}} for run.json; prints a warning to stderr when p99 lag exceeds `lag_warn_ms`.

    Never raises: a run that wrote no events simply has no lag figures.
    """
    threshold_ms = params.get("lag_warn_ms", DEFAULT_LAG_WARN_MS)
    try:
        import duckdb

        row = duckdb.connect().execute(f"""
            SELECT count(*), quantile_cont(s.t_ns - a.t_ns, 0.5), quantile_cont(s.t_ns - a.t_ns, 0.99),
                   max(s.t_ns - a.t_ns)
            FROM read_parquet('{table_glob(run_dir)}') a JOIN read_parquet('{table_glob(run_dir)}') s
              ON a.req_id = s.req_id AND a.kind = 'ARRIVE' AND s.kind = 'SEND'""").fetchone()
    except Exception as e:  # no events at all, unreadable parts: report, never fail the run here
        return {"client_lag": {"error": f"{type(e).__name__}: {e}"}}
    n, p50, p99, worst = row
    if not n:
        return {"client_lag": {"requests": 0}}
    lag = {"requests": n, "p50_ms": round(ns_to_ms(p50), 3), "p99_ms": round(ns_to_ms(p99), 3),
           "max_ms": round(ns_to_ms(worst), 3), "threshold_ms": threshold_ms,
           "behind": bool(ns_to_ms(p99) > threshold_ms)}
    if lag["behind"]:
        lag["warning"] = (f"client fell behind the schedule: send lag p99 {lag['p99_ms']:.1f} ms > "
                          f"{threshold_ms:g} ms; measured latencies include client delay (use --workers N, "
                          f"lower the rate, or raise lag_warn_ms)")
        print(f"kvbench: warning: {lag['warning']}", file=sys.stderr)
    return {"client_lag": lag}
