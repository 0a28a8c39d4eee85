"""Benchmark (not a test): kvbench's simulator against SplitwiseSim on the same workload, in CPU seconds.

Run:  python tests/bench/bench_peers.py --splitwise DIR --python PEER_PYTHON [--max-requests N] [--reps 1]

DIR is an extracted snapshot of SplitwiseSim's public sources (github.com/Mutinifni/splitwise-sim) and PEER_PYTHON
the interpreter of a throwaway virtualenv with its requirements (hydra-core, omegaconf, numpy, pandas, scipy,
networkx, simpy); nothing of it is vendored here. The script copies DIR to a temporary directory, drops the Ray
launcher from its Hydra config (this machine has no Ray cluster) and writes the workload there:
the conversation trace (first N requests, 1-token outputs raised to 2, as SplitwiseSim cannot end a request after
its prompt; arrivals shifted by 1 s, as its instances are allocated at t=0) as SplitwiseSim's CSV and as Mooncake
JSONL for kvbench. Both simulate the same shape: 4 colocated instances of a 70B Llama on 8 x A100-80GB each
(SplitwiseSim: ORCA start state, llama2-70b, round robin, its measured performance model; kvbench: the TOML below).
Each side runs in a child process; CPU time is user + system from os.wait4 (that child alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "conversation_trace.jsonl"

KVBENCH_TARGET = """kind = "sim"
description = "peer comparison: 4 colocated engines, Llama-3-70B on A100-80GB TP8 (SplitwiseSim's ORCA shape)"
model = "Llama-3-70B"
gpus_per_node = 8
prefix_caching = false

[engine]
token_budget = 2048
max_running = 512
block_tokens = 16
chunked_prefill = true

[pools.main]
role = "colocated"
instances = 4
gpu = "A100-80GB"
tp = 8

[router]
name = "round_robin"
"""

SPLITWISE_ARGS = [
    "trace.filename=kvbench",
    "seed=0",
    "performance_model=db",
    "applications.0.model_architecture=llama2-70b",
    "applications.0.model_size=llama2-70b-fp16",
    "cluster.servers.0.count=4",
    "start_state=orca",
]


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one child process, which must succeed."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode(errors='replace')[-2000:]}")
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime


def write_workload(work: Path, trace: Path, n: int | None) -> int:
    """The trace as kvbench JSONL and SplitwiseSim CSV (see the module docstring); returns the request count."""
    rows = ["request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size"]
    out = []
    with trace.open() as f:
        for i, line in enumerate(f):
            if n is not None and i == n:
                break
            r = json.loads(line)
            r["output_length"] = max(2, r["output_length"])
            r["timestamp"] += 1000
            out.append(json.dumps(r))
            rows.append(f"{i},2,0,{r['timestamp'] / 1000:.6f},1,{r['input_length']},{r['output_length']}")
    (work / "kvbench.jsonl").write_text("\n".join(out) + "\n")
    (work / "splitwise" / "traces" / "kvbench.csv").write_text("\n".join(rows) + "\n")
    (work / "colocated4.toml").write_text(KVBENCH_TARGET)
    return len(out)


def prepare_splitwise(src: Path, work: Path) -> Path:
    """A copy of the snapshot whose Hydra config uses the basic (local) launcher."""
    dst = work / "splitwise"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("results", "outputs", ".git"))
    cfg = dst / "configs" / "config.yaml"
    text = cfg.read_text().replace("  - override hydra/launcher: ray\n", "")
    cfg.write_text(text[: text.index("  launcher:")] if "  launcher:" in text else text)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splitwise", type=Path, required=True, help="extracted SplitwiseSim snapshot")
    ap.add_argument("--python", required=True, help="python of the throwaway venv with SplitwiseSim's requirements")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--reps", type=int, default=1)
    ns = ap.parse_args()
    kvbench = str(Path(sys.executable).with_name("kvbench"))
    with tempfile.TemporaryDirectory(prefix="kvbench-peers-") as d:
        work = Path(d)
        sw = prepare_splitwise(ns.splitwise, work)
        n = write_workload(work, ns.trace, ns.max_requests)
        print(f"{n:,} requests of {ns.trace.name}, 4 colocated 70B instances (load {os.getloadavg()[0]:.1f})")
        k_cpu, s_cpu = [], []
        for i in range(ns.reps):
            out = work / f"k{i}"
            k = timed([kvbench, "replay", "--trace", str(work / "kvbench.jsonl"), "--target",
                       str(work / "colocated4.toml"), "-q", "--out", str(out)])  # fmt: skip
            s = timed([ns.python, "run.py", *SPLITWISE_ARGS], cwd=sw)
            k_cpu.append(k[1])
            s_cpu.append(s[1])
            print(f"  run {i + 1}: kvbench CPU {k[1]:.2f} s (wall {k[0]:.1f}), SplitwiseSim CPU {s[1]:.2f} s "
                  f"(wall {s[0]:.1f}) -> {s[1] / k[1]:.1f}x")  # fmt: skip
        k_med, s_med = statistics.median(k_cpu), statistics.median(s_cpu)
        print(f"median CPU: kvbench {k_med:.2f} s, SplitwiseSim {s_med:.2f} s, ratio {s_med / k_med:.1f}x")
        print("DistServe's simulator: not run (see docs/benchmarks.md)")


if __name__ == "__main__":
    main()
