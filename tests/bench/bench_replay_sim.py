"""Benchmark (not a test): the whole `kvbench replay --target sim -q` command, in simulated requests per second.

Run:  python tests/bench/bench_replay_sim.py [--reps 3] [--trace FILE] [--target sim] [--base DIR] [--cold]
      [--instructions]

Each repetition runs the command in a child process (imports, trace parsing, set-up, simulation, Parquet log) and
reads its wall time and its CPU time (user + system, from resource.getrusage of the children). The children read
compiled bytecode, as an installed package does: they write it to a temporary PYTHONPYCACHEPREFIX in one untimed
run first, whatever PYTHONDONTWRITEBYTECODE says (`--cold` keeps the environment as it is instead). Beside each
repetition the machine's speed unit (CPython heap events/s, /work/shared/tools/speedunit.py) is measured, and the
figures are normalised to 2.6 M events/s: normalised = raw * 2.6e6 / unit. Medians of --reps repetitions.
`--instructions` also runs the command once per side under valgrind's cachegrind and prints the instructions it
executed: a figure the machine's load does not move (the run is ~50x slower; a simulated run's log is cut into
parts by row count alone, so it writes the same parts as a normal run).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "conversation_trace.jsonl"
UNIT = ROOT.parent / "shared" / "tools" / "speedunit.py"
REFERENCE_UNIT = 2_600_000.0


def speed_unit() -> float:
    """Heap events/s of this machine right now (the shared tool, or the same loop when it is absent)."""
    if UNIT.exists():
        out = subprocess.run([sys.executable, str(UNIT)], capture_output=True, text=True, check=True).stdout
        return float(out.strip())
    import heapq
    import random

    rng, best, n = random.Random(1), 0.0, 300_000
    for _ in range(3):
        heap: list = []
        t0 = time.perf_counter()
        for i in range(n):
            heapq.heappush(heap, (rng.random(), i, None))
            if len(heap) > 64:
                heapq.heappop(heap)
        best = max(best, n / (time.perf_counter() - t0))
    return best


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def finished(run_dir: Path) -> int:
    """FINISH events in a run's log (one per completed request)."""
    import duckdb

    con = duckdb.connect()
    parts = [str(p) for p in run_dir.rglob("events/*.parquet")]
    row = con.execute("SELECT count(*) FROM read_parquet(?) WHERE kind = 'FINISH'", [parts]).fetchone()
    con.close()
    return int(row[0]) if row else 0


def child_env(source: Path | None, pycache: Path | None) -> dict[str, str]:
    """The children's environment: `source` first on PYTHONPATH; bytecode cached in `pycache` (None: as given)."""
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = str(source)
    if pycache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, finished requests) of one `kvbench replay` in a child process with environment `env`."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [str(Path(sys.executable).with_name("kvbench")), "replay", *args, "-q", "--out", d]
        cpu0, t0 = children_cpu(), time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
        n = finished(Path(d))
    return wall, cpu, n


def instructions(args: list[str], env: dict[str, str]) -> int:
    """Instructions (user space, all threads) of one `kvbench replay` under cachegrind."""
    with tempfile.TemporaryDirectory() as d:
        cg = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={Path(d) / 'cg.out'}"]
        cmd = [
            *cg,
            str(Path(sys.executable).with_name("kvbench")),
            "replay",
            *args,
            "-q",
            "--out",
            str(Path(d) / "run"),
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def measure(label: str, args: list[str], reps: int, env: dict[str, str]) -> list[tuple[float, float, int, float]]:
    rows = []
    for i in range(reps):
        u = speed_unit()
        wall, cpu, n = run_once(args, env)
        u = (u + speed_unit()) / 2
        rows.append((wall, cpu, n, u))
        print(
            f"  {label} run {i + 1}: {n} requests, wall {wall:.2f} s, CPU {cpu:.2f} s, unit {u / 1e6:.2f} M ev/s -> "
            f"{n / cpu:,.0f} req/CPU-s raw, {n / cpu * REFERENCE_UNIT / u:,.0f} normalised"
        )
    return rows


def report(label: str, rows: list[tuple[float, float, int, float]]) -> None:
    med = statistics.median
    print(
        f"{label}: median wall {med(r[0] for r in rows):.2f} s, CPU {med(r[1] for r in rows):.2f} s, "
        f"speed unit {med(r[3] for r in rows) / 1e6:.2f} M ev/s; simulated requests/s: "
        f"{med(r[2] / r[0] for r in rows):,.0f} per wall-s, {med(r[2] / r[1] for r in rows):,.0f} per CPU-s raw, "
        f"{med(r[2] / r[1] * REFERENCE_UNIT / r[3] for r in rows):,.0f} normalised to {REFERENCE_UNIT / 1e6:.1f} M ev/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--target", default="sim")
    ap.add_argument("--base", type=Path, help="another checkout (e.g. git archive of main) timed in turn, A/B")
    ap.add_argument("--cold", action="store_true", help="no bytecode cache of our own (the environment decides)")
    ap.add_argument("--instructions", action="store_true", help="also count instructions once per side (valgrind)")
    ns = ap.parse_args()
    args = ["--trace", str(ns.trace), "--target", ns.target]
    with tempfile.TemporaryDirectory() as pyc:
        cache = None if ns.cold else Path(pyc)
        env_this, env_base = child_env(None, cache), child_env(ns.base, cache)
        if cache:  # untimed: compiles the bytecode the timed runs read
            run_once(args, env_this)
            if ns.base:
                run_once(args, env_base)
        print(f"kvbench replay {' '.join(args)} -q   (load {os.getloadavg()[0]:.1f}, bytecode cached: {not ns.cold})")
        this: list[tuple[float, float, int, float]] = []
        base: list[tuple[float, float, int, float]] = []
        for _ in range(ns.reps):  # interleaved, so both see the same load
            this += measure("this", args, 1, env_this)
            if ns.base:
                base += measure("base", args, 1, env_base)
        counts = {}
        if ns.instructions:
            if shutil.which("valgrind") is None:
                raise SystemExit("--instructions needs valgrind")
            counts = {
                "this": instructions(args, env_this),
                **({"base": instructions(args, env_base)} if ns.base else {}),
            }
    if ns.base:
        report("base", base)
    report("this", this)
    if "base" in counts:
        change = (counts["this"] / counts["base"] - 1) * 100
        print(
            f"instructions (cachegrind): base {counts['base'] / 1e9:.3f} G, this {counts['this'] / 1e9:.3f} G ({change:+.1f} %)"
        )
    elif counts:
        print(f"instructions (cachegrind): {counts['this'] / 1e9:.3f} G")


if __name__ == "__main__":
    main()
