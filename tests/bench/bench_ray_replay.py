"""Benchmark of a 2-worker real-endpoint replay: forked local workers vs Ray actors (`replay --workers 2 --ray`).

Run:  python tests/bench/bench_ray_replay.py [--reps 3] [--rate 100] [--seconds 10]

Against `kvbench serve --target fixed:ttft_ms=5,itl_ms=5` in its own process, --rate req/s for --seconds s of
single requests (32 tokens in, 3 out), each repetition into a fresh directory:
* local: execute(workers=2), two forked processes;
* Ray: execute_on_ray(workers=2) on a local cluster of 2 CPUs on 127.0.0.1, started once (its start-up is
  reported apart) and warmed by one run (the first actors start Ray's worker processes).
Per way: the wall time of the whole call (set-up included), the run's own span (run.json wall_s, from t0), the
achieved send rate (requests sent / span of their SENDs) and the client lag p99 (run.json); medians of --reps.
The machine is shared and loaded (its load average and the speed unit, /work/shared/tools/speedunit.py when there,
are printed beside): read the figures as rough.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.serve_proc import start_serve  # noqa: E402

from kvbench.devservers.llamacpp import stop  # noqa: E402

SPEEDUNIT = Path("/work/shared/tools/speedunit.py")


def workload(rate: float, seconds: float):
    from kvbench.records import Request
    from kvbench.workload.load import Workload

    gap_ns = round(1e9 / rate)
    reqs = [Request(i, i * gap_ns, 32, 3, (i,), 512) for i in range(round(rate * seconds))]
    return Workload("bench", "mem", "0", lambda: iter(reqs))


def one(run, wl, url: str) -> dict[str, float]:
    """One replay by `run(workload, spec, opts)`: wall time, span, achieved rate, client lag p99."""
    import duckdb

    from kvbench.run import RunOptions
    from kvbench.targets import resolve

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "run"
        t = time.perf_counter()
        _, st = run(wl, resolve(url), RunOptions(out=out, workers=2))
        wall = time.perf_counter() - t
        assert st.status == "complete" and st.finished == st.submitted, st
        m = json.loads((out / "run.json").read_text())
        n, first, last = (
            duckdb.connect()
            .execute(
                f"SELECT count(*), min(t_ns), max(t_ns) FROM read_parquet('{out}/events/*.parquet') WHERE kind = 'SEND'"
            )
            .fetchone()
        )
    return {
        "wall_s": wall,
        "span_s": m["wall_s"],
        "rate": (n - 1) / ((last - first) / 1e9),
        "lag_p99_ms": m["client_lag"]["p99_ms"],
    }


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def show(name: str, r: dict[str, float]) -> None:
    print(
        f"{name:<14} wall {r['wall_s']:6.2f} s  (set-up {r['wall_s'] - r['span_s']:5.2f} s, run {r['span_s']:6.2f} s)  "
        f"achieved {r['rate']:7.2f} req/s  client lag p99 {r['lag_p99_ms']:7.2f} ms",
        flush=True,
    )


def speed_unit() -> str:
    if not SPEEDUNIT.is_file():
        return "n/a"
    import subprocess

    return subprocess.run([sys.executable, str(SPEEDUNIT)], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    from kvbench.run import execute

    wl = workload(args.rate, args.seconds)
    print(f"2 workers, {args.rate:g} req/s for {args.seconds:g} s; load average {os.getloadavg()}", flush=True)
    print(f"speed unit before {speed_unit()}", flush=True)
    server, url = start_serve("--target", "fixed:ttft_ms=5,itl_ms=5")
    try:
        local = medians([one(execute, wl, url) for _ in range(args.reps)])
        show("local fork", local)
        on_ray = ray_medians(wl, url, args.reps)
        show("Ray actors", on_ray)
        print(
            f"Ray vs local: set-up +{(on_ray['wall_s'] - on_ray['span_s']) - (local['wall_s'] - local['span_s']):.2f} s"
        )
    finally:
        stop(server)
    print(f"speed unit after {speed_unit()}; load average after {os.getloadavg()}")


def ray_medians(wl, url: str, reps: int) -> dict[str, float]:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep the cluster on 127.0.0.1
    t = time.perf_counter()
    import ray

    from kvbench.run_ray import execute_on_ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"Ray start      {time.perf_counter() - t:6.2f} s (once, apart from the runs)", flush=True)

    def run(w, spec, opts):
        return execute_on_ray(w, spec, opts, "auto")

    try:
        one(run, wl, url)  # warm: the first actors start Ray's worker processes
        return medians([one(run, wl, url) for _ in range(reps)])
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
