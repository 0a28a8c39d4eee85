"""Benchmark: `kvbench report` on one generated run of N requests, and a comparison report of R such runs.

    python tests/bench/bench_report.py [--requests 1000000] [--runs 10] [--compare-requests N] [--repeat 3]
                                       [--kind real|sim] [--dir /tmp/kvbench-bench] [--cpu-goal 3]

Runs are generated straight to Parquet by tests/bench/bench_metrics.py's generator (~8 events a request), each
comparison run with its own seed-free copy of the same shape (they differ only in their directory name).
Prints the median wall time, CPU time and peak RSS of the `kvbench report` process over the repetitions, the ratio
to the issue's budgets (30 s wall for one run, 60 s for the comparison; --cpu-goal s of CPU for one run), and the
CPU time normalised to this machine's speed: CPU s x (speed unit / REFERENCE_UNIT), the speed unit
(/work/shared/tools/speedunit.py, heap events/s) measured right before and after each report, medians of both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
SPEEDUNIT = Path(__file__).resolve().parents[3] / "shared" / "tools" / "speedunit.py"  # beside the checkouts
REFERENCE_UNIT = 1_000_000  # heap events/s: normalised figures are CPU seconds on a machine of this speed

from bench_metrics import generate  # noqa: E402  (the metrics benchmark's generator: one shape for both)


def ensure_run(root: Path, kind: str, n: int, copy: int = 0) -> Path:
    """The generated run (cached under `root`); copies share the base run's Parquet via hard links."""
    base = root / f"{kind}-{n}"
    if not (base / "run.json").exists():
        t0 = time.perf_counter()
        generate(base, n, kind)
        print(f"generated {base} in {time.perf_counter() - t0:.1f} s")
    if copy == 0:
        return base
    dst = root / f"{kind}-{n}-copy{copy}"
    if not (dst / "run.json").exists():
        shutil.copytree(base, dst, copy_function=os.link, dirs_exist_ok=True)
    return dst


def time_report(runs: list[Path], out: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one `kvbench report RUN...` process.
    CPU time is printed too because the shared 2-core machine's load stretches wall time."""
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "report", *map(str, runs), "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"kvbench report failed with status {status}: {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def speed_unit() -> float | None:
    """The machine's speed unit (heap events/s) from the shared tool, or None where it is not beside the repo."""
    if not SPEEDUNIT.is_file():
        return None
    out = subprocess.run([sys.executable, str(SPEEDUNIT)], capture_output=True, text=True, check=True).stdout
    return float(out.split()[0])


def measure(label: str, runs: list[Path], out: Path, repeat: int, budget_s: float, cpu_goal: float | None) -> None:
    results, units = [], []
    for _ in range(repeat):
        units.append(speed_unit())
        results.append(time_report(runs, out))
        units.append(speed_unit())
    walls, cpus, rss = ([r[i] for r in results] for i in range(3))
    med, cpu = statistics.median(walls), statistics.median(cpus)
    known = [u for u in units if u]
    unit = statistics.median(known) if known else None
    norm = (
        f"{cpu * unit / REFERENCE_UNIT:.2f} s CPU normalised to {REFERENCE_UNIT / 1e6:g} M events/s"
        if unit
        else "no speed unit"
    )
    goal = f", ratio to the {cpu_goal:g} s CPU goal: {cpu / cpu_goal:.2f}" if cpu_goal else ""
    print(
        f"{label}: median {med:.2f} s wall (runs {', '.join(f'{w:.2f}' for w in walls)}), "
        f"median {cpu:.2f} s CPU (runs {', '.join(f'{c:.2f}' for c in cpus)}), {norm} "
        f"(speed unit median {unit or 0:,.0f}){goal}; peak RSS {max(rss):.0f} MB, "
        f"{out.stat().st_size / 1e6:.2f} MB of HTML; ratio to the {budget_s:.0f} s wall budget: {med / budget_s:.2f}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000, help="requests of the single-run report")
    ap.add_argument("--runs", type=int, default=10, help="runs in the comparison report (0: skip it)")
    ap.add_argument("--compare-requests", type=int, default=None, help="requests per comparison run [--requests]")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kind", choices=("real", "sim"), default="real")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kvbench-bench"))
    ap.add_argument("--cpu-goal", type=float, default=3.0, help="CPU seconds the single-run report should stay under")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    one = ensure_run(a.dir, a.kind, a.requests)
    measure(
        f"report of 1 run x {a.requests:,} requests ({a.kind})",
        [one],
        a.dir / "report-1.html",
        a.repeat,
        30,
        a.cpu_goal,
    )
    if a.runs:
        n = a.compare_requests or a.requests
        runs = [ensure_run(a.dir, a.kind, n, copy=i) for i in range(a.runs)]
        measure(
            f"comparison report of {a.runs} runs x {n:,} requests ({a.kind})",
            runs,
            a.dir / f"report-{a.runs}.html",
            a.repeat,
            60,
            None,
        )


if __name__ == "__main__":
    main()
