"""Benchmark: `kvbench summary` on a generated run of N requests (default 1,000,000, ~8 events each).

    python tests/bench/bench_metrics.py [--requests 1000000] [--repeat 3] [--kind real|sim|realsim] [--dir /tmp/kvbench-bench]

`real` writes what the fixed target writes plus ROUTE/PREFILL events (8 events a request, no steps table);
`sim` adds a simulator-shaped steps table (16 instances, a row per batch-membership change) so the ITL/TBT work
over steps is measured too. Both are written straight to Parquet with pyarrow (seconds, not a replay).
`realsim` replays the conversation trace back to back (each copy its own hash ids, tests/bench/bench_sim.py's
`repeated`) on sim:pd-2p2d: a real simulator log (~11 events a request, ~2.9 step rows a request; about two
minutes to make 1,000,000 requests, once).
Prints the median wall time and the peak RSS of the `kvbench summary` process over the repetitions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvbench.eventlog import EVENTS, REQUESTS, SCHEMA_VERSION, STEPS, write_manifest

MS = 1_000_000
STEP_NS = 15 * MS
KINDS = ["ARRIVE", "SEND", "ROUTE", "PREFILL_START", "PREFILL_END", "FIRST_TOKEN", "LAST_TOKEN", "FINISH"]


def _requests(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    arrive = np.sort(rng.integers(0, n * 2_500_000, n))  # ~400 requests/s
    inp = rng.integers(100, 8000, n).astype(np.int32)
    out = rng.integers(1, 200, n).astype(np.int32)
    prefill = arrive + rng.integers(1, 50, n) * MS
    first = prefill + (inp.astype(np.int64) * 20_000)  # 20 us a prompt token
    last = first + (out.astype(np.int64) - 1) * STEP_NS
    return {
        "arrive": arrive,
        "inp": inp,
        "out": out,
        "prefill": prefill,
        "first": first,
        "last": last,
        "inst": np.arange(n) % 16,
        "cached": (inp * rng.uniform(0, 0.6, n)).astype(np.int32),
    }


def _events(r: dict[str, np.ndarray], n: int) -> pa.Table:
    times = [
        r["arrive"],
        r["arrive"],
        r["arrive"] + 100_000,
        r["prefill"],
        r["first"],
        r["first"],
        r["last"],
        r["last"],
    ]
    t = np.concatenate(times)
    ids = np.tile(np.arange(n, dtype=np.int64), len(KINDS))
    kind = pa.DictionaryArray.from_arrays(np.repeat(np.arange(len(KINDS), dtype=np.int8), n), KINDS)
    names = np.array([f"colocated-{i}" for i in range(16)], dtype=object)
    inst = np.where(np.repeat(np.arange(len(KINDS)), n) >= 2, names[np.tile(r["inst"], len(KINDS))], None)
    tokens = np.concatenate(
        [
            r["inp"],
            np.zeros(n, np.int32),
            np.zeros(n, np.int32),
            r["inp"],
            r["inp"],
            np.ones(n, np.int32),
            r["out"],
            r["out"],
        ]
    )
    tok_mask = np.repeat(np.array([0, 1, 1, 0, 0, 0, 0, 0], bool), n)
    cached = np.concatenate([np.zeros(n * 7, np.int32), r["cached"]])
    cached_mask = np.repeat(np.array([1, 1, 1, 1, 1, 1, 1, 0], bool), n)
    order = np.lexsort((np.repeat(np.arange(len(KINDS)), n), t))
    cols = [
        pa.array(t),
        pa.array(ids),
        kind,
        pa.array(inst, pa.string()),
        pa.array(tokens, mask=tok_mask),
        pa.array(cached, mask=cached_mask),
        pa.nulls(n * 8, pa.string()),
        pa.nulls(n * 8, pa.int64()),
        pa.nulls(n * 8, pa.string()),
    ]
    return pa.Table.from_arrays(cols, schema=EVENTS).take(order)


def _steps(r: dict[str, np.ndarray]) -> pa.Table:
    """Per instance: a row between consecutive decode joins/leaves, batch = requests decoding then."""
    parts = []
    for i in range(16):
        sel = r["inst"] == i
        t = np.concatenate([r["first"][sel], r["last"][sel]])
        d = np.concatenate([np.ones(sel.sum(), np.int64), -np.ones(sel.sum(), np.int64)])
        o = np.argsort(t, kind="stable")
        t, batch = t[o], np.cumsum(d[o])
        keep = (np.diff(t) > 0) & (batch[:-1] > 0)
        start, end, b = t[:-1][keep], t[1:][keep], batch[:-1][keep]
        step_ns = STEP_NS * 2 // 3 + b * 50_000  # a decode step: 10 ms + 50 us a request in the batch
        n_steps = np.maximum(1, (end - start) // step_ns).astype(np.int32)
        parts.append(
            pa.table(
                {
                    "instance": pa.array([f"colocated-{i}"] * len(start)),
                    "t_ns": start,
                    "end_ns": end,
                    "n_steps": n_steps,
                    "batch": b.astype(np.int32),
                    "prefill_tokens": np.zeros(len(start), np.int32),
                    "decode_tokens": b.astype(np.int32),
                    "kv_blocks_used": b * 10,
                    "kv_blocks_total": np.full(len(start), 10_000),
                }
            )
        )
    return pa.concat_tables(parts).cast(STEPS)


def replay_sim(run_dir: Path, n: int) -> None:
    """A real sim:pd-2p2d run of n requests of the repeated conversation trace."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_sim import TRACE, repeated

    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload.load import Workload

    execute(
        Workload("repeated", str(TRACE), "bench", lambda: repeated(n)), resolve("sim:pd-2p2d"), RunOptions(out=run_dir)
    )


def generate(run_dir: Path, n: int, kind: str) -> None:
    if kind == "realsim":
        return replay_sim(run_dir, n)
    rng = np.random.default_rng(0)
    r = _requests(n, rng)
    for d in ("events", "requests", "steps"):
        (run_dir / d).mkdir(parents=True, exist_ok=True)
    pq.write_table(_events(r, n), run_dir / "events" / "part-00000.parquet", compression="zstd", row_group_size=262_144)
    reqs = pa.table(
        {
            "req_id": np.arange(n),
            "session_id": np.full(n, -1),
            "turn": np.zeros(n, np.int32),
            "arrival_ns": r["arrive"],
            "input_tokens": r["inp"],
            "output_tokens": r["out"],
            "reason_tokens": np.zeros(n, np.int32),
            "block_tokens": np.full(n, 512, np.int32),
            "n_blocks": (r["inp"] + 511) // 512,
            "trace_reuse_tokens": r["cached"] + 10,
            "workload": pa.array(["bench"] * n),
        }
    ).cast(REQUESTS)
    pq.write_table(reqs, run_dir / "requests" / "part-00000.parquet", compression="zstd")
    if kind == "sim":
        pq.write_table(_steps(r), run_dir / "steps" / "part-00000.parquet", compression="zstd")
    write_manifest(
        run_dir, {"schema_version": SCHEMA_VERSION, "run_id": f"bench-{kind}-{n}", "status": "complete", "seed": 0}
    )


def time_summary(run_dir: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, all threads) and peak RSS (MB) of one `kvbench summary RUN`."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "summary", str(run_dir), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = __import__("os").wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"kvbench summary failed with status {status}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kind", choices=("real", "sim", "realsim"), default="real")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kvbench-bench"))
    a = ap.parse_args()
    run_dir = a.dir / f"{a.kind}-{a.requests}"
    if not (run_dir / "run.json").exists():
        t0 = time.perf_counter()
        generate(run_dir, a.requests, a.kind)
        print(f"generated {run_dir} in {time.perf_counter() - t0:.1f} s")
    results = [time_summary(run_dir) for _ in range(a.repeat)]
    walls, cpus, rss = ([r[i] for r in results] for i in range(3))
    doc = json.loads((run_dir / "summary.json").read_text())["metrics"]
    print(
        f"kvbench summary {run_dir}: median {statistics.median(walls):.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}),"
        f" CPU {statistics.median(cpus):.2f} s, peak RSS {max(rss):.0f} MB; {doc['requests']:,} requests,"
        f" ITL gaps {doc['itl_ms.count']:,}; load average {__import__('os').getloadavg()[0]:.1f} on {__import__('os').cpu_count()} cores"
    )
    print(f"ratio to the 5 s budget: {statistics.median(walls) / 5:.2f}; to the 2 GB budget: {max(rss) / 2048:.2f}")


if __name__ == "__main__":
    main()
