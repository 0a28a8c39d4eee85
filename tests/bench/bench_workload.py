"""Benchmark: trace reading, streaming a 1,000,000-request Mooncake trace, and `trace info` with the LRU curve.

Run: python tests/bench/bench_workload.py [--reps 5] [--big-requests 1000000]
Prints medians of several repetitions; the 1M-request figures come from a fresh subprocess per repetition so
its peak RSS (resource.getrusage) is the reader's own, next to a subprocess that only imports kvbench.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = REPO.parent / "shared" / "traces" / "conversation_trace.jsonl"

CHILD = """
import resource, sys, time
from kvbench.workload import load
t, c = time.perf_counter(), time.process_time()
n = 0
if sys.argv[1] != "-":
    for r in load.from_trace(sys.argv[1]).make():
        n += 1
dt, dc = time.perf_counter() - t, time.process_time() - c
print(n, dt, dc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def write_big(path: Path, n: int) -> None:
    """n requests: the conversation trace repeated with shifted timestamps and block ids (written once)."""
    import orjson

    recs = [orjson.loads(line) for line in CONVERSATION.read_bytes().splitlines()]
    span = recs[-1]["timestamp"] + 1
    id_span = 1 + max(h for r in recs for h in r["hash_ids"])
    with open(path, "wb") as f:
        for i in range(n):
            k, r = divmod(i, len(recs))
            r = recs[r]
            f.write(
                orjson.dumps(
                    {
                        "timestamp": r["timestamp"] + k * span,
                        "input_length": r["input_length"],
                        "output_length": r["output_length"],
                        "hash_ids": [h + k * id_span for h in r["hash_ids"]],
                    }
                )
                + b"\n"
            )


def child(path: str) -> tuple[int, float, float, int]:
    """(requests, wall s, CPU s, peak RSS KiB) of streaming `path` in a fresh process ("-": import only)."""
    out = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, check=True).stdout
    n, dt, dc, rss_kib = out.split()
    return int(n), float(dt), float(dc), int(rss_kib)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big-requests", type=int, default=1_000_000)
    args = ap.parse_args()
    from kvbench.workload import load
    from kvbench.workload.mooncake import read_mooncake
    from kvbench.workload.stats import trace_stats

    t_read = median_time(lambda: sum(1 for _ in read_mooncake(CONVERSATION)), args.reps)
    t_load = median_time(lambda: sum(1 for _ in load.from_trace(CONVERSATION).make()), args.reps)
    print(
        f"conversation trace (12,031 req): read+validate median {t_read:.3f} s; "
        f"with format detection and sortedness scan {t_load:.3f} s (target < 0.5 s)"
    )
    caps = [3_000_000, 10_000_000, 50_000_000]
    t_info = median_time(lambda: trace_stats(read_mooncake(CONVERSATION), caps), args.reps)
    print(f"trace info statistics + LRU 3M,10M,50M: median {t_info:.3f} s (target < 2 s)")
    t_cli = median_time(
        lambda: subprocess.run(
            [sys.executable, "-c", "from kvbench.cli.app import main; main()", "trace", "info", str(CONVERSATION)],
            capture_output=True,
            check=True,
        ),
        max(1, args.reps // 2),
    )
    print(f"`kvbench trace info` end to end (process start included): median {t_cli:.3f} s")

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.jsonl"
        t = time.perf_counter()
        write_big(big, args.big_requests)
        print(
            f"wrote {args.big_requests:,}-request trace ({big.stat().st_size / 1e6:.0f} MB) in "
            f"{time.perf_counter() - t:.1f} s"
        )
        runs = [child(str(big)) for _ in range(max(1, args.reps // 2))]
        base_rss = statistics.median(child("-")[3] for _ in range(2))
        n = runs[0][0]
        t_big = statistics.median(r[1] for r in runs)
        cpu_big = statistics.median(r[2] for r in runs)
        rss = statistics.median(r[3] for r in runs)
        print(
            f"streamed {n:,} requests: median {t_big:.2f} s wall, {cpu_big:.2f} s CPU "
            f"({n / t_big / 1e3:.0f} k req/s; target < 10 s); "
            f"peak RSS {rss / 1024:.0f} MiB vs {base_rss / 1024:.0f} MiB for import only "
            f"(+{(rss - base_rss) / 1024:.0f} MiB; the file is {big.stat().st_size / 2**20:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
