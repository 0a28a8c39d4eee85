"""Benchmark: how long `kvbench replay` takes to say an argument or a file is wrong (goal: <= 0.3 s).

Run: python tests/bench/bench_startup.py [--reps 3]
Each case is a fresh `kvbench` process (wall time from spawn to exit, medians of --reps); `kvbench --version` is
the floor (interpreter and CLI start-up). The machine speed unit (../shared/tools/speedunit.py, CPython heap
events/s) is measured right beside; normalised = raw x unit / REFERENCE_UNIT, the time on a machine of that unit.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEEDUNIT = REPO.parent / "shared" / "tools" / "speedunit.py"
REFERENCE_UNIT = 2.6e6  # heap events/s of a quiet machine of this kind (issue 15's figure)

CASES = {
    "--version": ["--version"],
    "missing --trace": ["replay", "--trace", "no-such-trace.jsonl", "--target", "sim"],
    "bad --dataset-name": ["replay", "--dataset-name", "sonet", "--target", "sim"],
    "bad --goodput": ["replay", "--dataset-name", "random", "--goodput", "ttft:fast"],
    "--users with --request-rate": ["replay", "--dataset-name", "random", "--users", "4", "--request-rate", "5"],
    "missing --dataset-path": ["replay", "--dataset-name", "sharegpt", "--dataset-path", "none.json"],
}


def speed_unit() -> float:
    spec = importlib.util.spec_from_file_location("speedunit", SPEEDUNIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.unit())


def command() -> list[str]:
    """The installed console script beside this interpreter, as users run it."""
    script = Path(sys.executable).parent / "kvbench"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from kvbench.cli.app import main; main()"]


def wall_s(args: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    r = subprocess.run([*command(), *args], capture_output=True, text=True, cwd=REPO)
    return time.perf_counter() - t, r.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    reps = parser.parse_args().reps
    unit = speed_unit()
    print(f"speed unit {unit / 1e6:.2f} M heap events/s (reference {REFERENCE_UNIT / 1e6:.1f} M)")
    print(f"{'case':<30} {'exit':>4} {'raw s':>7} {'normalised s':>13}")
    for name, args in CASES.items():
        runs = [wall_s(args) for _ in range(reps)]
        raw = statistics.median(t for t, _ in runs)
        print(f"{name:<30} {runs[0][1]:>4} {raw:>7.3f} {raw * unit / REFERENCE_UNIT:>13.3f}")
    print(f"(medians of {reps}; speed unit after: {speed_unit() / 1e6:.2f} M)")


if __name__ == "__main__":
    main()
