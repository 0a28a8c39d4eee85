"""Benchmark of the sim target: simulated requests per wall-second, scaling to 1M requests, memory, start-up.

Run:  python tests/bench/bench_sim.py [--reps 3] [--preset pd-2p2d] [--million] [--instructions [--base DIR]]

* end to end: the first 10,000 requests of conversation_trace.jsonl through kvbench.run.execute (trace parsing,
  replayer, event log written to Parquet) against the preset (default pd-2p2d: 2P2D, prefix caching, KV transfer);
* sim only: the same requests pre-parsed, events dropped (what the simulator itself costs);
* start-up: a fresh interpreter importing kvbench and building the target;
* --million: 1,000,000 requests (the trace repeated with fresh hash ids, back to back) end to end in a child
  process, reporting time, the ratio to 100x the 10k time and the child's peak RSS.
* --instructions: the CPU instructions of the sim-only part alone (valgrind's callgrind, collecting only inside
  the functools.reduce call that runs the simulation; PYTHONHASHSEED=0, cyclic GC as during a replay), which do
  not depend on the machine's load; --base DIR measures another checkout of the package the same way beside it.
Medians of --reps repetitions; this machine is shared, so read the figures as rough.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "conversation_trace.jsonl"


def repeated(n: int):
    """The conversation trace back to back, each copy with its own hash ids (no cross-copy prefix reuse)."""
    from kvbench.workload.mooncake import read_mooncake

    base = list(read_mooncake(TRACE))
    span = base[-1].arrival_ns + 1_000_000_000
    rid = 0
    for copy in range(n // len(base) + 1):
        for r in base:
            if rid == n:
                return
            yield r._replace(
                req_id=rid,
                arrival_ns=r.arrival_ns + copy * span,
                hash_ids=tuple(h + copy * 200_000 for h in r.hash_ids),
            )  # dense, as remapped ids are
            rid += 1


def end_to_end(preset: str, n: int, million: bool = False, clock=time.perf_counter) -> float:
    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload.load import Workload, from_trace, shape

    wl = shape(from_trace(TRACE), max_requests=n)
    if million:
        wl = Workload("repeated", str(TRACE), "bench", lambda: repeated(n))
    with tempfile.TemporaryDirectory() as d:
        t = clock()
        _, stats = execute(wl, resolve(f"sim:{preset}"), RunOptions(seed=0, out=Path(d)))
        dt = clock() - t
    assert stats.finished + stats.rejected + stats.errors == n, stats
    return dt


def sim_only(preset: str, n: int, clock=time.perf_counter) -> float:
    from kvbench.eventlog import EventLog
    from kvbench.sim.target import SimTarget
    from kvbench.target import RunContext
    from kvbench.targets import resolve
    from kvbench.workload.mooncake import read_mooncake

    reqs = list(islice(read_mooncake(TRACE), n))
    with tempfile.TemporaryDirectory() as d:
        target = SimTarget(resolve(f"sim:{preset}"), RunContext(0, Path(d), EventLog(d)))
        for r in reqs:
            target.submit(r, r.arrival_ns)
        t = clock()
        target.run(lambda ev: None)
        return clock() - t


def sim_run_alone(preset: str, n: int) -> None:
    """The sim-only run inside functools.reduce, the one call callgrind's --toggle-collect watches (the set-up
    before it is not counted); the cyclic GC as kvbench.run sets it for a replay."""
    from kvbench.eventlog import EventLog
    from kvbench.run import VIRTUAL_GC_THRESHOLD
    from kvbench.sim.target import SimTarget
    from kvbench.target import RunContext
    from kvbench.targets import resolve
    from kvbench.workload.mooncake import read_mooncake

    reqs = list(islice(read_mooncake(TRACE), n))
    with tempfile.TemporaryDirectory() as d:
        target = SimTarget(resolve(f"sim:{preset}"), RunContext(0, Path(d), EventLog(d)))
        for r in reqs:
            target.submit(r, r.arrival_ns)
        gc.collect()
        gc.set_threshold(VIRTUAL_GC_THRESHOLD, *gc.get_threshold()[1:])
        functools.reduce(lambda _a, _b: target.run(lambda ev: None), [0, 1])


def instructions(preset: str, n: int, src: str | None = None) -> tuple[int, str]:
    """(instructions of the sim-only run of `n` requests (see sim_run_alone), the kvbench package it imported);
    `src`: a checkout to import instead of the installed one."""
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_sim, kvbench; "
    code += f"print(kvbench.__file__); bench_sim.sim_run_alone({preset!r}, {n})"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce"]
        # cwd: the temporary directory, so that `python -c` does not import a kvbench/ from where it was started
        run = subprocess.run([*cmd, f"--callgrind-out-file={out}", sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, cwd=d, text=True)  # fmt: skip
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1]), run.stdout.strip().splitlines()[-1]
    raise RuntimeError("callgrind wrote no totals")


def startup(preset: str) -> float:
    code = (
        "import time; t = time.perf_counter(); import tempfile, pathlib; from kvbench.targets import resolve, "
        "build; from kvbench.target import RunContext; from kvbench.eventlog import EventLog; d = tempfile.mkdtemp(); "
        f"build(resolve('sim:{preset}'), RunContext(0, pathlib.Path(d), EventLog(d))); "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def million(preset: str) -> tuple[float, float]:
    """(seconds, peak RSS MB) of 1M requests end to end, in a child process (its own peak memory)."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_sim; "
        f"print(bench_sim.end_to_end({preset!r}, 1_000_000, million=True))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return float(out.stdout.strip().splitlines()[-1]), peak_mb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--preset", default="pd-2p2d")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--instructions", action="store_true", help="only the sim-only instruction count (callgrind)")
    ap.add_argument("--base", help="with --instructions: another checkout (its directory holding kvbench/) too")
    a = ap.parse_args()
    n = a.n
    if a.instructions:
        for label, src in (("base", a.base), ("this", None)) if a.base else (("this", None),):
            ins, where = instructions(a.preset, n, src)
            print(
                f"sim only, {n:,} requests, instructions ({label}: {where}): {ins / 1e9:.3f} G = {ins / n:,.0f} per request"
            )
        return
    s = statistics.median(startup(a.preset) for _ in range(a.reps))
    print(f"start-up (import + build {a.preset}): median {s:.3f} s")
    for what, fn in (
        ("end to end (parse + replay + Parquet)", end_to_end),
        ("sim only (pre-parsed, events dropped)", sim_only),
    ):
        for label, clock in (("wall", time.perf_counter), ("cpu", time.process_time)):
            dt = statistics.median(fn(a.preset, n, clock=clock) for _ in range(a.reps))
            print(f"{what}, {n:,} requests, {label} time: median {dt:.3f} s -> {n / dt:,.0f} req/s")
            if fn is end_to_end and label == "wall":
                e2e = dt
    if a.million:
        secs, peak = million(a.preset)
        print(
            f"1,000,000 requests end to end: {secs:.1f} s = {secs / (100 * e2e):.2f} x (100 x the 10k time), "
            f"{1e6 / secs:,.0f} req/s, peak RSS {peak:.0f} MB"
        )


if __name__ == "__main__":
    main()
