"""Benchmark of `kvbench sweep` on the simulator: parallel efficiency of the local process pool and of Ray.

Run:  python tests/bench/bench_sweep.py [--reps 3] [--requests 1500] [--rates 4,8] [--trace FILE] [--no-ray]

One sweep of 4 x len(--rates) points (2 prefill x 2 decode instances x the rates, sim:pd-2p2d on
traces/kimi-sample.jsonl or --trace, the first --requests requests each), timed from start to sweep.parquet, each repetition into a fresh directory:
* one at a time in this process (--workers 1): the serial baseline;
* the local pool with 1 and with 2 processes (a fork server; the 1-process pool shows the pool's own cost);
* Ray tasks on a local cluster of 2 CPUs started once (its start-up is reported apart), kept on 127.0.0.1.
Speed-ups are serial / pool-of-2 and pool-of-2 / Ray; medians of --reps repetitions. The machine is shared and
loaded (its load average is printed): read the figures as rough.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"
SPEC = """trace = "{trace}"
target = "sim:pd-2p2d"
max_requests = {requests}
slo = "ttft=2000,tpot=100"
[axes]
"pools.prefill.instances" = [1, 2]
"pools.decode.instances" = [1, 2]
rate = [{rates}]
"""


def timed(sweep, workers: int | None = None, ray: str | None = None) -> float:
    from kvbench.plan.sweep import run_sweep

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        rows = run_sweep(sweep, Path(d) / "out", workers=workers, ray=ray)
        dt = time.perf_counter() - t
    assert [r["status"] for r in rows] == ["complete"] * len(sweep.jobs), rows
    return dt


def median_of(reps: int, fn) -> float:
    return statistics.median(fn() for _ in range(reps))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--rates", default="4,8", help="offered rates (req/s), comma-separated")
    ap.add_argument("--trace", type=Path, default=TRACE, help="Mooncake-format trace (longer points: a larger one)")
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    from kvbench.plan.sweepspec import load_sweep

    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "bench.toml"
        rates = ", ".join(str(float(r)) for r in args.rates.split(","))
        spec.write_text(SPEC.format(trace=args.trace.resolve(), requests=args.requests, rates=rates))
        sweep = load_sweep(spec)
        print(f"{len(sweep.jobs)} points x {args.requests} requests; load average {os.getloadavg()}", flush=True)
        serial = median_of(args.reps, lambda: timed(sweep, workers=1))
        print(f"one at a time        {serial:7.2f} s  ({serial / len(sweep.jobs):.2f} s a point)", flush=True)
        pool1 = median_of(args.reps, lambda: timed_pool(sweep, 1))
        print(f"local pool, 1 proc   {pool1:7.2f} s", flush=True)
        pool2 = median_of(args.reps, lambda: timed_pool(sweep, 2))
        print(f"local pool, 2 procs  {pool2:7.2f} s  speed-up vs one at a time {serial / pool2:.2f}x", flush=True)
        if not args.no_ray:
            on_ray = ray_median(sweep, args.reps)
            print(f"Ray, 2 CPUs          {on_ray:7.2f} s  vs the local pool of 2: {pool2 / on_ray:.2f}x", flush=True)
        print(f"load average after {os.getloadavg()}")


def timed_pool(sweep, workers: int) -> float:
    """The local pool with `workers` processes, also for 1 (run_sweep runs workers=1 in this process)."""
    from kvbench.plan import sweep as sweep_mod
    from kvbench.plan.points import run_point
    from kvbench.plan.tasks import local_pool

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        t = time.perf_counter()
        sweep_mod.prepare(sweep, out)
        points = out / sweep_mod.POINTS
        rows = list(local_pool(run_point, list(sweep.jobs), lambda j: points / j.name, workers, *_quiet(sweep)))
        sweep_mod.write_table(out, sweep, rows)
        dt = time.perf_counter() - t
    assert all(r["status"] == "complete" for r in rows)
    return dt


def _quiet(sweep):
    from kvbench.plan.progress import Counts

    return Counts(len(sweep.jobs)), lambda c: None


def ray_median(sweep, reps: int) -> float:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep the cluster on 127.0.0.1
    t = time.perf_counter()
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"Ray start            {time.perf_counter() - t:7.2f} s (once)", flush=True)
    try:
        timed(sweep, ray="auto")  # warm: the first tasks start Ray's worker processes
        return median_of(reps, lambda: timed(sweep, ray="auto"))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
