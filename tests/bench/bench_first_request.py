"""Benchmark: time from command start to the first request, as seen by a loopback mock server in its own process.

    python tests/bench/bench_first_request.py [--reps 3]

Each repetition spawns a fresh process and takes time.time() just before; the server notes time.time() when the
first request's bytes arrive (tests/bench/loopback.py). Cases, medians of `--reps`:
- `kvbench replay --trace conversation_trace.jsonl -n 1` (the public 12,031-request Mooncake trace);
- `kvbench replay --workload spec.toml -n 1` for a generated spec with `requests = 100000` (sessions of 1-4 turns,
  a shared-prefix group mix): it must not be built in full before the first request;
- a bare aiohttp client (`python -c`, imports aiohttp and posts one streamed request): the floor of a Python client.
Both kvbench runs get `--set model=bench --set word_tokens=1.0`, so no probe of /v1/models precedes the request.
Prints raw seconds, the load average and the machine speed unit (/work/shared/tools/speedunit.py, heap events/s)
measured right beside them, and the seconds normalised to a quiet machine of this kind, 2.6 M events/s (issue 15:
raw x unit / 2.6e6).
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


def first_request_s(argv: list[str], srv: ServerProcess) -> float:
    srv.stats()  # reset
    t = time.time()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    first = srv.stats()["first_unix"]
    assert first, f"no request reached the server: {argv}"
    return first - t


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ServerProcess() as srv:
        tmp = Path(d)
        units = [speed_unit()]
        runs: dict[str, list[float]] = {}
        for rep in range(a.reps):
            for label, argv in cases(srv, tmp).items():
                out = (
                    [str(tmp / f"run{rep}-{len(runs.get(label, []))}-{time.monotonic_ns()}")]
                    if "kvbench" in label
                    else []
                )
                runs.setdefault(label, []).append(first_request_s(argv + out, srv))
        units.append(speed_unit())
        unit = statistics.median(units)
        print(
            f"load average {os.getloadavg()[0]:.1f}; speed unit {unit / 1e6:.2f} M events/s (before/after: "
            f"{units[0] / 1e6:.2f} / {units[1] / 1e6:.2f})"
        )
        bare = statistics.median(runs["bare aiohttp client"])
        for label, secs in runs.items():
            med = statistics.median(secs)
            print(
                f"{label}: command start to first request {med:.3f} s (runs {' / '.join(f'{s:.3f}' for s in secs)}); "
                f"normalised {med * unit / QUIET_UNIT:.3f} s; vs bare aiohttp {med / bare:.2f}x"
            )


if __name__ == "__main__":
    main()
