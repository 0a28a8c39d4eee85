"""Benchmark: time from command start to the first request, as seen by a loopback mock server in its own process.

    python tests/bench/bench_first_request.py [--reps 3] [--cold] [--where]

Each repetition spawns a fresh process and takes time.time() just before; the server notes time.time() when the
first request's bytes arrive (tests/bench/loopback.py). The children read compiled bytecode, as an installed
package does: one untimed round first writes it to a temporary PYTHONPYCACHEPREFIX, whatever
PYTHONDONTWRITEBYTECODE says (with that variable set, as in this environment, and `--cold`, every kvbench run
recompiles its modules: ~0.3-0.4 s that a user never pays). Cases, medians of `--reps`:
- `kvbench replay --trace conversation_trace.jsonl -n 1` (the public 12,031-request Mooncake trace);
- `kvbench replay --workload spec.toml -n 1` for a generated spec with `requests = 100000` (sessions of 1-4 turns,
  a shared-prefix group mix): it must not be built in full before the first request;
- a bare aiohttp client (`python -c`, imports aiohttp and posts one streamed request): the floor of a Python client.
Both kvbench runs get `--set model=bench --set word_tokens=1.0`, so no probe of /v1/models precedes the request.
Prints raw seconds, the load average beside each case and the machine speed unit (/work/shared/tools/speedunit.py,
heap events/s) measured right beside them, and the seconds normalised to a quiet machine of this kind, 2.6 M
events/s (issue 15: raw x unit / 2.6e6). `--where` adds one run of the trace case under `python -X importtime`:
the import time of each top-level package on the path to the first request (importtime's own overhead inflates
them a little); the rest of that run's time to the first request is the interpreter's start, reading the
workload, opening the event log and the run's start margin (200 ms by design: the pool's connections are
opened in it, before t0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopback import ServerProcess

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = REPO.parent / "shared" / "traces" / "conversation_trace.jsonl"
SPEEDUNIT = REPO.parent / "shared" / "tools" / "speedunit.py"
QUIET_UNIT = 2.6e6  # heap events/s on a quiet machine of this kind (issue 15)

SPEC = """
description = "100k generated requests, for the first-request benchmark"
kind = "synthetic"
requests = 100000

[arrivals]
process = "poisson"
rate = 50.0

[input]
dist = "lognormal"
p50 = 200
p99 = 2000
max = 8192

[output]
dist = "lognormal"
p50 = 64
p99 = 512
max = 2048

[prefix]
groups = 8
tokens = 2048

[sessions]
turns_min = 1
turns_max = 4
think_s = 1.0
"""

BARE = """
import asyncio, json, sys
import aiohttp

async def main(url):
    body = json.dumps({"model": "bench", "prompt": "w " * 64, "max_tokens": 4, "stream": True})
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/completions", data=body, headers={"Content-Type": "application/json"}) as r:
            async for _ in r.content.iter_any():
                pass

asyncio.run(main(sys.argv[1]))
"""


def speed_unit() -> float:
    return float(subprocess.run([sys.executable, str(SPEEDUNIT)], capture_output=True, text=True).stdout)


def child_env(pycache: Path | None) -> dict[str, str]:
    """The children's environment: bytecode cached in `pycache` (None: the environment as given)."""
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def first_request_s(argv: list[str], srv: ServerProcess, env: dict[str, str], stderr=subprocess.DEVNULL) -> float:
    srv.stats()  # reset
    t = time.time()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    first = srv.stats()["first_unix"]
    assert first, f"no request reached the server: {argv}"
    return first - t


def import_times(stderr: str) -> dict[str, float]:
    """Seconds per top-level package from `-X importtime` lines (`import time: self | cumulative | name`): each
    module's own time, added to its package's (numpy's, say, whoever imported it)."""
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        own, _, name = line[len("import time:") :].split("|")
        if own.strip().isdigit():
            top = name.strip().split(".")[0]
            out[top] = out.get(top, 0.0) + int(own) / 1e6
    return out


def where(argv: list[str], srv: ServerProcess, env: dict[str, str], tmp: Path) -> None:
    """One run under -X importtime: what is imported before the first request, by package."""
    log = tmp / "importtime.txt"
    with log.open("w") as f:
        secs = first_request_s([sys.executable, "-X", "importtime", *argv], srv, env, stderr=f)
    times = import_times(log.read_text())
    total = sum(times.values())
    top = sorted(times.items(), key=lambda kv: -kv[1])[:8]
    print(
        f"where (trace case, one run under -X importtime): first request at {secs:.3f} s; imports {total:.3f} s "
        f"({', '.join(f'{name} {s:.3f}' for name, s in top)}); the rest {secs - total:.3f} s"
    )


def cases(srv: ServerProcess, tmp: Path) -> dict[str, list[str]]:
    kvbench = str(Path(sys.executable).parent / "kvbench")
    spec = tmp / "gen100k.toml"
    spec.write_text(SPEC)
    common = [srv.url, "--set", "model=bench", "--set", "word_tokens=1.0", "-q", "-n", "1", "--out"]
    return {
        "kvbench, trace (conversation, -n 1)": [kvbench, "replay", "--trace", str(CONVERSATION), "--target", *common],
        "kvbench, generated spec (100k requests, -n 1)": [
            kvbench,
            "replay",
            "--workload",
            str(spec),
            "--target",
            *common,
        ],
        "bare aiohttp client": [sys.executable, "-c", BARE, srv.url],
    }


def out_dir(tmp: Path, label: str) -> list[str]:
    return [str(tmp / f"run-{time.monotonic_ns()}")] if "kvbench" in label else []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="no bytecode cache (the environment as given)")
    ap.add_argument("--where", action="store_true", help="also one run under -X importtime")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ServerProcess() as srv:
        tmp = Path(d)
        env = child_env(None if a.cold else tmp / "pycache")
        for label, argv in cases(srv, tmp).items():  # untimed: writes the bytecode (and warms the page cache)
            first_request_s(argv + out_dir(tmp, label), srv, env)
        units = [speed_unit()]
        runs: dict[str, list[tuple[float, float]]] = {}
        for _ in range(a.reps):
            for label, argv in cases(srv, tmp).items():
                secs = first_request_s(argv + out_dir(tmp, label), srv, env)
                runs.setdefault(label, []).append((secs, os.getloadavg()[0]))
        units.append(speed_unit())
        unit = statistics.median(units)
        print(
            f"speed unit {unit / 1e6:.2f} M events/s (before/after: {units[0] / 1e6:.2f} / {units[1] / 1e6:.2f}); "
            f"bytecode {'compiled each run (--cold)' if a.cold else 'cached'}"
        )
        bare = statistics.median(s for s, _ in runs["bare aiohttp client"])
        for label, got in runs.items():
            med = statistics.median(s for s, _ in got)
            print(
                f"{label}: command start to first request {med:.3f} s (runs {' / '.join(f'{s:.3f}' for s, _ in got)}"
                f"; load {' / '.join(f'{load:.1f}' for _, load in got)}); normalised {med * unit / QUIET_UNIT:.3f} s; "
                f"vs bare aiohttp {med / bare:.2f}x"
            )
        if a.where:
            trace_case = next(iter(cases(srv, tmp).items()))
            where(trace_case[1] + out_dir(tmp, trace_case[0]), srv, env, tmp)


if __name__ == "__main__":
    main()
