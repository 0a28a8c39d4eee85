"""Benchmark (not a test): kvbench's simulator against SplitwiseSim and DistServe's on the same workload, in CPU s.

Run:  python tests/bench/bench_peers.py [--splitwise DIR --python PEER_PYTHON] [--distserve DIR --distserve-python
      PEER_PYTHON [--peer-timeout S]] [--max-requests N] [--reps 1]

DIR is an extracted snapshot of SplitwiseSim's public sources (github.com/Mutinifni/splitwise-sim) and PEER_PYTHON
the interpreter of a throwaway virtualenv with its requirements (hydra-core, omegaconf, numpy, pandas, scipy,
networkx, simpy); nothing of it is vendored here. The script copies DIR to a temporary directory, drops the Ray
launcher from its Hydra config (this machine has no Ray cluster) and writes the workload there:
the conversation trace (first N requests, 1-token outputs raised to 2, as SplitwiseSim cannot end a request after
its prompt; arrivals shifted by 1 s, as its instances are allocated at t=0) as SplitwiseSim's CSV and as Mooncake
JSONL for kvbench. Both simulate the same shape: 4 colocated instances of a 70B Llama on 8 x A100-80GB each
(SplitwiseSim: ORCA start state, llama2-70b, round robin, its measured performance model; kvbench: the TOML below).
DistServe: DIR is an extracted snapshot of github.com/LLMServe/DistServe (its simdistserve package) and PEER_PYTHON
a throwaway virtualenv with simpy, numpy and pandas. The same requests (arrivals in ms, prompt and output lengths)
go to `simdistserve.benchmarks.simulate_dist --backend distserve --arrival custom` as its JSON workload: one
prefill and one decode worker of OPT-13B, TP 1 each, on its A100-80GB profile; kvbench simulates 1P1D OPT-13B on
A100-80GB (the TOML below). OPT's context is 2,048 tokens, so for this pair a prompt is cut to fit beside its
output and an output to 512 tokens. A peer still running after --peer-timeout wall seconds is stopped (and one
past 6 GB of address space fails) and its CPU time so far is printed as a lower bound.
Each side runs in a child process; CPU time is user + system from os.wait4 (that child alone).
"""

from __future__ import annotations

import argparse
import json
import os
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

KVBENCH_1P1D = """kind = "sim"
description = "peer comparison: 1 prefill + 1 decode engine, OPT-13B on A100-80GB TP1 (DistServe's 1P1D shape)"
model = "OPT-13B"
gpus_per_node = 8
prefix_caching = false

[pools.prefill]
role = "prefill"
instances = 1
gpu = "A100-80GB"

[pools.decode]
role = "decode"
instances = 1
gpu = "A100-80GB"
"""

OPT_CONTEXT, OPT_MAX_OUTPUT = 2048, 512
PEER_MEMORY = 6 << 30  # address-space limit of a peer run: a runaway simulator must not take the machine's memory
DISTSERVE_ARGS = ["--backend", "distserve", "--model", "facebook/opt-13b", "--arrival", "custom"]

SPLITWISE_ARGS = [
    "trace.filename=kvbench",
    "seed=0",
    "performance_model=db",
    "applications.0.model_architecture=llama2-70b",
    "applications.0.model_size=llama2-70b-fp16",
    "cluster.servers.0.count=4",
    "start_state=orca",
]


def timed(
    cmd: list[str], cwd: Path | None = None, timeout: float | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, bool]:
    """(wall s, CPU s, finished) of one child process, which must succeed unless stopped after `timeout` s."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (PEER_MEMORY, PEER_MEMORY))) if timeout else None
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=env, preexec_fn=limit)
        deadline = None if timeout is None else t0 + timeout
        while True:  # os.wait4, not p.wait: its rusage is the CPU time of that child alone
            pid, status, ru = os.wait4(p.pid, os.WNOHANG if deadline else 0)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                p.kill()
                deadline = None
            time.sleep(0.2)
        finished = os.WIFEXITED(status)
        if finished and os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed:\n{err.read().decode(errors='replace')[-2000:]}")
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, finished


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
    if (work / "splitwise").is_dir():
        (work / "splitwise" / "traces" / "kvbench.csv").write_text("\n".join(rows) + "\n")
    (work / "colocated4.toml").write_text(KVBENCH_TARGET)
    (work / "1p1d.toml").write_text(KVBENCH_1P1D)
    # OPT's context is 2,048 tokens: DistServe never schedules a longer request and its memory grows without end,
    # so for that comparison (both sides) a prompt is cut to fit beside its output, an output to 512 tokens
    ds = [json.loads(x) for x in out]
    for r in ds:
        r["output_length"] = min(r["output_length"], OPT_MAX_OUTPUT)
        r["input_length"] = min(r["input_length"], OPT_CONTEXT - r["output_length"])
        r["hash_ids"] = r["hash_ids"][: -(-r["input_length"] // 512)]  # Mooncake's 512-token blocks
    (work / "kvbench-opt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ds))
    (work / "distserve.json").write_text(json.dumps([{"start_time": r["timestamp"], "prompt_len": r["input_length"],
                                                      "output_len": r["output_length"]} for r in ds]))  # fmt: skip
    return len(out)


def prepare_splitwise(src: Path, work: Path) -> Path:
    """A copy of the snapshot whose Hydra config uses the basic (local) launcher."""
    dst = work / "splitwise"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("results", "outputs", ".git"))
    cfg = dst / "configs" / "config.yaml"
    text = cfg.read_text().replace("  - override hydra/launcher: ray\n", "")
    cfg.write_text(text[: text.index("  launcher:")] if "  launcher:" in text else text)
    return dst


def _kvbench(work: Path, target: str, i: int, trace: str = "kvbench.jsonl") -> tuple[float, float, bool]:
    kvbench = str(Path(sys.executable).with_name("kvbench"))
    return timed([kvbench, "replay", "--trace", str(work / trace), "--target", str(work / target), "-q",
                  "--out", str(work / f"k-{target}-{i}")])  # fmt: skip


def _distserve(ns: argparse.Namespace, work: Path, n: int) -> tuple[float, float, bool]:
    cmd = [ns.distserve_python, "-m", "simdistserve.benchmarks.simulate_dist", *DISTSERVE_ARGS]
    cmd += ["--workload", str(work / "distserve.json"), "--N", str(n), "--output", str(work / "distserve.csv")]
    env = {**os.environ, "PYTHONPATH": str(ns.distserve)}
    return timed(cmd, cwd=work, timeout=ns.peer_timeout, env=env)


def _compare(name: str, peer: str, runs: list[tuple[tuple, tuple]]) -> None:
    """One line per run and the medians: kvbench's and the peer's CPU seconds and their ratio."""
    for i, (k, s) in enumerate(runs):
        bound = "" if s[2] else f" (stopped after {s[0]:.0f} s wall: a lower bound)"
        print(f"  {name} run {i + 1}: kvbench CPU {k[1]:.2f} s (wall {k[0]:.1f}), {peer} CPU {s[1]:.2f} s "
              f"(wall {s[0]:.1f}){bound} -> {s[1] / k[1]:.1f}x")  # fmt: skip
    k_med, s_med = statistics.median(k[1] for k, _ in runs), statistics.median(s[1] for _, s in runs)
    print(f"{name} median CPU: kvbench {k_med:.2f} s, {peer} {s_med:.2f} s, ratio {s_med / k_med:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splitwise", type=Path, help="extracted SplitwiseSim snapshot")
    ap.add_argument("--python", help="python of the throwaway venv with SplitwiseSim's requirements")
    ap.add_argument("--distserve", type=Path, help="extracted DistServe snapshot (the folder holding simdistserve)")
    ap.add_argument("--distserve-python", help="python of the throwaway venv with simpy, numpy, pandas")
    ap.add_argument("--peer-timeout", type=float, default=1800.0, help="wall seconds before a peer run is stopped")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--reps", type=int, default=1)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvbench-peers-") as d:
        work = Path(d)
        sw = prepare_splitwise(ns.splitwise, work) if ns.splitwise else None
        n = write_workload(work, ns.trace, ns.max_requests)
        print(f"{n:,} requests of {ns.trace.name} (load {os.getloadavg()[0]:.1f})")
        if sw is not None:
            runs = [(_kvbench(work, "colocated4.toml", i), timed([ns.python, "run.py", *SPLITWISE_ARGS], cwd=sw,
                     timeout=ns.peer_timeout)) for i in range(ns.reps)]  # fmt: skip
            _compare("4 colocated 70B instances", "SplitwiseSim", runs)
        if ns.distserve is not None:
            runs = [
                (_kvbench(work, "1p1d.toml", i, "kvbench-opt.jsonl"), _distserve(ns, work, n)) for i in range(ns.reps)
            ]
            _compare("1P1D OPT-13B", "DistServe", runs)


if __name__ == "__main__":
    main()
