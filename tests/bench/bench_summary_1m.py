"""Benchmark (not a test): `kvbench summary` of a 1,000,000-request simulated run: wall, CPU and peak RSS.

Run:  python tests/bench/bench_summary_1m.py [--run /tmp/kvbench-1m] [--requests 1000000] [--reps 3] [--replay]

The run is made once if --run does not hold one: `kvbench replay --workload SPEC --target sim -q` of a synthetic
spec (Poisson 20 req/s, lognormal prompts and replies, shared prefixes) written next to it, never in the repo.
Each repetition runs `kvbench summary RUN --json` twice in a child process: cold (RUN/.cache removed first, so the
log is pivoted and the cache written) and warm (reading that cache); CPU time and peak RSS come from os.wait4
(that child alone). Beside each the machine's speed unit is measured (tests/bench/bench_replay_sim.py)
and the CPU time is also given normalised to 2.6 M heap events/s. --replay also times one `kvbench replay`
without -q (the run, then the closing summary in the same process) into a fresh directory, for its peak RSS.
--stages first runs one cold summary in this process and prints each DuckDB statement that took >= 50 ms (start,
wall, process CPU: DuckDB's threads and the step-gap thread included) and the gaps between them (Python/numpy);
statements on the summary's second connections (the steps rows, the samples and time series: other threads) are
marked "*" and overlap the others.
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
from bench_replay_sim import REFERENCE_UNIT, speed_unit  # noqa: E402

SPEC = """description = "synthetic requests for the summary benchmark: Poisson 20 req/s, shared prefixes"
kind = "synthetic"
requests = {requests}

[arrivals]
process = "poisson"
rate = 20.0

[input]
dist = "lognormal"
p50 = 500
p99 = 4000
max = 8192

[output]
dist = "lognormal"
p50 = 128
p99 = 1024
max = 2048

[prefix]
groups = 16
tokens = 2048
popularity = "zipf"
share = 0.5
"""


def kvbench() -> str:
    return str(Path(sys.executable).with_name("kvbench"))


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def make_run(run: Path, requests: int, quiet: bool = True) -> tuple[float, float, float]:
    spec = run.parent / f"{run.name}-workload.toml"
    spec.write_text(SPEC.format(requests=requests))
    cmd = [kvbench(), "replay", "--workload", str(spec), "--target", "sim", "--out", str(run), "--overwrite"]
    return timed(cmd + (["-q"] if quiet else []))


class _Timed:
    """A DuckDB connection whose execute() notes (start, wall, CPU, statement) in `log`; its cursors (the second
    connections the summary runs statements on, on other threads) note theirs with a "*" before the statement."""

    def __init__(self, con: object, log: list[tuple[float, float, float, str]], t0: float, mark: str = "") -> None:
        self._con, self._log, self._t0, self._mark = con, log, t0, mark

    def execute(self, query: str, *args: object) -> _Timed:
        start, cpu = time.perf_counter(), time.process_time()
        self._con.execute(query, *args)  # type: ignore[attr-defined]
        what = self._mark + " ".join(query.split())[:90]
        self._log.append((start - self._t0, time.perf_counter() - start, time.process_time() - cpu, what))
        return self

    def cursor(self) -> _Timed:
        return _Timed(self._con.cursor(), self._log, self._t0, "* ")  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def stages(run: Path) -> None:
    """One cold summary in process, statement by statement."""
    from kvbench.analysis import runset
    from kvbench.present import summary

    shutil.rmtree(run / ".cache", ignore_errors=True)
    log: list[tuple[float, float, float, str]] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    summary.open_runs = lambda runs: _Timed(runset.open_runs(runs), log, t0)  # type: ignore[assignment]
    summary.build(run)
    print(f"stages of one cold summary (load {os.getloadavg()[0]:.1f}): start s, wall s, CPU s, statement")
    end = 0.0
    for start, wall, cpu, what in sorted(log):
        side = what.startswith("*")
        if start - end >= 0.05 and not side:
            print(f"  {end:6.2f} {start - end:6.2f}      - (Python, numpy, fetches)")
        if wall >= 0.05:
            print(f"  {start:6.2f} {wall:6.2f} {cpu:6.2f} {what}")
        end = end if side else start + wall
    total = time.perf_counter() - t0
    print(f"  total wall {total:.2f} s, CPU {time.process_time() - cpu0:.2f} s (imports before it not counted)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("/tmp/kvbench-1m"))
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--replay", action="store_true", help="also time one replay without -q (closing summary)")
    ap.add_argument("--stages", action="store_true", help="first time one cold summary statement by statement")
    ns = ap.parse_args()
    if not (ns.run / "run.json").is_file():
        wall, cpu, rss = make_run(ns.run, ns.requests)
        print(f"made {ns.run}: {ns.requests:,} requests, wall {wall:.0f} s, CPU {cpu:.0f} s, peak RSS {rss:.0f} MB")
    if ns.stages:
        stages(ns.run)
    print(f"kvbench summary {ns.run} --json   (load {os.getloadavg()[0]:.1f})")
    rows: dict[str, list[tuple[float, float, float, float]]] = {"cold": [], "warm": []}
    for i in range(ns.reps):
        for kind, rs in rows.items():
            if kind == "cold":
                shutil.rmtree(ns.run / ".cache", ignore_errors=True)
            u = speed_unit()
            wall, cpu, rss = timed([kvbench(), "summary", str(ns.run), "--json"])
            u = (u + speed_unit()) / 2
            rs.append((wall, cpu, rss, cpu * u / REFERENCE_UNIT))
            print(
                f"  run {i + 1} {kind}: wall {wall:.2f} s, CPU {cpu:.2f} s, peak RSS {rss:.0f} MB, "
                f"unit {u / 1e6:.2f} M ev/s -> CPU {rs[-1][3]:.2f} s normalised"
            )
    med = statistics.median
    for kind, rs in rows.items() if ns.reps else ():
        print(
            f"median {kind}: wall {med(r[0] for r in rs):.2f} s, CPU {med(r[1] for r in rs):.2f} s "
            f"({med(r[3] for r in rs):.2f} s normalised to {REFERENCE_UNIT / 1e6:.1f} M ev/s), "
            f"peak RSS {med(r[2] for r in rs):.0f} MB"
        )
    if ns.replay:  # its closing summary is cold: a fresh run has no cache
        fresh = ns.run.with_name(ns.run.name + "-replay")
        wall, cpu, rss = make_run(fresh, ns.requests, quiet=False)
        print(f"kvbench replay (not -q, closing summary): wall {wall:.0f} s, CPU {cpu:.0f} s, peak RSS {rss:.0f} MB")
        shutil.rmtree(fresh)


if __name__ == "__main__":
    main()
