"""Benchmark: client throughput measured from outside, kvbench vs a bare aiohttp client, by server-side counts.

    python tests/bench/bench_client_throughput.py [--reps 3] [--requests 20000] [--tokens 16] [--concurrency 64]
        [--base DIR] [--cold] [--together]

Each client runs as its own process against a loopback mock server in another (tests/bench/loopback.py) and
sends `--requests` streamed requests of `--tokens` tokens, `--concurrency` in flight. The server counts the
responses it completed and the span from the first request's arrival to the last response's write; the rate is
their ratio, so start-up and shut-down of either client are outside it. Clients:
- kvbench: `kvbench replay --trace T -c 64 -q` over a Mooncake trace whose requests are all due at 0 (closed loop);
- a bare aiohttp + uvloop client (`python -c`): 64 workers posting and reading each stream with iter_any, parsing
  nothing (what a Python client costs that measures nothing);
- with `--base DIR`, kvbench again from another checkout (DIR holds its `kvbench/`, e.g. `git archive main
  kvbench | tar -x -C DIR`), run in turn with the others so that all see the same load.
For /v1/completions and /v1/chat/completions (vLLM-shaped chunks; chat opens with a chunk carrying `role`), with
the server writing each response whole (one read a response) or one write per token (`split`: a token or a few
a read, as from a real streaming server). Prints medians and kvbench / bare ratios (goal >= 1.0), each client's
steady-state CPU per request (runs of n and n / 4 requests: the CPU difference over the request difference, a
steadier figure than rates on a loaded machine), the load
average and the machine speed unit (/work/shared/tools/speedunit.py) measured beside them; ratios of two
clients measured alternately in one run need no normalising, the rates are also given normalised to a quiet
machine of this kind (2.6 M events/s: rate x 2.6e6 / unit). The children read compiled bytecode (one untimed
run of each client first), as in bench_first_request.py; `--cold` keeps the environment as given. On this
2-core machine the server and the client each want a core, so other jobs' load moves the rates by up to 2x from
one run to the next: more requests a run (default 20,000: a few seconds each) average over it.

`--together` runs the clients at the same time instead, each against a server process of its own, and counts
each server's completed responses over the window in which all of them were running (from the latest first
request to the earliest last response): every client then sees the same load at every instant, so the ratio
holds on a busy machine, where runs in turn see different loads. The clients (and their servers) then share the
cores with each other as well: each gets a like share, and the one that needs less CPU a request does more.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_first_request import QUIET_UNIT, child_env, speed_unit
from loopback import ServerProcess

BARE = """
import asyncio, json, sys
import aiohttp, uvloop

url, api, n, conc, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
body = {"model": "bench", "max_tokens": tokens, "stream": True}
if api == "chat":
    body["messages"] = [{"role": "user", "content": "w " * 64}]
else:
    body["prompt"] = "w " * 64
data = json.dumps(body).encode()
path = url + ("/chat/completions" if api == "chat" else "/completions")

async def main():
    left = [n]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def worker():
            while left[0] > 0:
                left[0] -= 1
                async with s.post(path, data=data, headers={"Content-Type": "application/json"}) as r:
                    async for _ in r.content.iter_any():
                        pass
        await asyncio.gather(*(worker() for _ in range(conc)))

uvloop.run(main())
"""


def trace(tmp: Path, n: int, tokens: int) -> Path:
    path = tmp / f"burst{n}x{tokens}.jsonl"
    lines = (
        json.dumps({"timestamp": 0, "input_length": 64, "output_length": tokens, "hash_ids": [i]}) for i in range(n)
    )
    path.write_text("\n".join(lines) + "\n")
    return path


def run_client(argv: list[str], srv: ServerProcess, n: int, env: dict[str, str]) -> tuple[float, float]:
    """(requests/s at the server, the client process's CPU seconds)."""
    srv.stats()  # reset
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    st = srv.stats()
    assert st["done"] == n, (st, argv)
    return st["done"] / (st["span_ns"] / 1e9), after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def run_together(argvs: dict[str, list[str]], servers: dict[str, ServerProcess], env: dict[str, dict[str, str]]):
    """All clients at once, each against its own server: each one's requests/s over the window in which all were
    running, and the load average at the end."""
    for srv in servers.values():
        srv.stats()  # reset
    procs = {name: subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env[name]) for name, argv in argvs.items()}
    for name, proc in procs.items():
        assert proc.wait() == 0, (name, argvs[name])
    stats = {name: servers[name].stats() for name in argvs}
    lo = max(st["first_ns"] for st in stats.values())
    hi = min(st["ends_ns"][-1] for st in stats.values())
    assert hi > lo, "the clients did not overlap: more requests (--requests)"
    rates = {}
    for name, st in stats.items():
        ends = st["ends_ns"]  # in order: each server appends as it writes
        rates[name] = (bisect.bisect_right(ends, hi) - bisect.bisect_left(ends, lo)) / ((hi - lo) / 1e9)
    return rates, os.getloadavg()[0]


def clients(srv: ServerProcess | dict[str, ServerProcess], api: str, a, tmp: Path, n: int) -> dict[str, list[str]]:
    """Each client's command line; `srv` one server for all, or one server each (by client name)."""
    url = (lambda name: srv[name].url) if isinstance(srv, dict) else (lambda name: srv.url)
    kvbench = str(Path(sys.executable).parent / "kvbench")
    sets = ["--set", "model=bench", "--set", "word_tokens=1.0", "--set", f"api={api}", "--set", "lag_warn_ms=1e9"]
    path = str(trace(tmp, n, a.tokens))

    def replay(name: str) -> list[str]:
        run = ["-c", str(a.concurrency), "-q", "--out", str(tmp / f"{name}{time.monotonic_ns()}")]
        return [kvbench, "replay", "--trace", path, "--target", url(name), *sets, *run]

    out = {"kvbench": replay("kvbench")}
    if a.base:
        out["base"] = replay("base")
    out["bare"] = [sys.executable, "-c", BARE, url("bare"), api, str(n), str(a.concurrency), str(a.tokens)]
    return out


def envs(a, tmp: Path) -> dict[str, dict[str, str]]:
    """Each client's environment: bytecode cached (unless --cold); the base's checkout first on the path."""
    env = child_env(None if a.cold else tmp / "pycache")
    base = {**env, "PYTHONPATH": str(Path(a.base).resolve())} if a.base else env
    return {"kvbench": env, "base": base, "bare": env}


Result = tuple[float, float, float]  # requests/s at the server, steady client CPU us a request, load average


def measure(split: bool, a, tmp: Path) -> dict[str, dict[str, list[Result]]]:
    """Per API and client, per repetition: requests/s at the server, steady-state client CPU us per request =
    (CPU(n) - CPU(n / 4)) / (3n / 4) (start-up and shut-down cancelled out), and the load average."""
    out: dict[str, dict[str, list[Result]]] = {}
    env = envs(a, tmp)
    with ServerProcess(split=split) as srv:
        for name, argv in clients(srv, "chat", a, tmp, 100).items():  # untimed: writes the bytecode
            run_client(argv, srv, 100, env[name])
        for _ in range(a.reps):
            for api in ("completions", "chat"):
                big, small = clients(srv, api, a, tmp, a.requests), clients(srv, api, a, tmp, a.requests // 4)
                for name in big:  # alternated, so drifts hit all alike
                    rate, cpu = run_client(big[name], srv, a.requests, env[name])
                    load = os.getloadavg()[0]
                    cpu_small = run_client(small[name], srv, a.requests // 4, env[name])[1]
                    steady_us = (cpu - cpu_small) / (a.requests - a.requests // 4) * 1e6
                    out.setdefault(api, {}).setdefault(name, []).append((rate, steady_us, load))
    return out


def measure_together(split: bool, a, tmp: Path) -> dict[str, dict[str, list[Result]]]:
    """--together: per API and client, per repetition, requests/s over the common window (no CPU figure: 0)."""
    out: dict[str, dict[str, list[Result]]] = {}
    env = envs(a, tmp)
    names = ["kvbench", "base", "bare"] if a.base else ["kvbench", "bare"]
    servers = {name: ServerProcess(split=split) for name in names}
    try:
        for name, argv in clients(servers, "chat", a, tmp, 100).items():  # untimed: writes the bytecode
            run_client(argv, servers[name], 100, env[name])
        for _ in range(a.reps):
            for api in ("completions", "chat"):
                rates, load = run_together(clients(servers, api, a, tmp, a.requests), servers, env)
                for name, rate in rates.items():
                    out.setdefault(api, {}).setdefault(name, []).append((rate, 0.0, load))
    finally:
        for srv in servers.values():
            srv.__exit__()
    return out


def row(mode: str, api: str, by_client: dict[str, list[Result]], unit: float) -> str:
    med = statistics.median
    rate = {name: med(r for r, _, _ in got) for name, got in by_client.items()}
    cells = [
        f"{name} {rate[name]:,.0f} ({rate[name] * QUIET_UNIT / unit:,.0f}) "
        f"[{' / '.join(f'{r:,.0f}' for r, _, _ in got)}] {med(c for _, c, _ in got):.0f} us"
        for name, got in by_client.items()
    ]
    loads = " / ".join(f"{load:.1f}" for _, _, load in by_client["bare"])
    base = f"; base / bare {rate['base'] / rate['bare']:.2f}" if "base" in rate else ""
    path = "chat/completions" if api == "chat" else "completions"
    return f"{mode:5} /v1/{path:17} ratio {rate['kvbench'] / rate['bare']:.2f}{base}: {'; '.join(cells)}; load {loads}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--base", help="another checkout's directory (holding kvbench/), run in turn with this one")
    ap.add_argument("--cold", action="store_true", help="no bytecode cache (the environment as given)")
    ap.add_argument("--together", action="store_true", help="the clients at once, each with its own server")
    a = ap.parse_args()
    run = measure_together if a.together else measure
    with tempfile.TemporaryDirectory() as d:
        units = [speed_unit()]
        results = {mode: run(mode == "split", a, Path(d)) for mode in ("whole", "split")}
        units.append(speed_unit())
    unit = statistics.median(units)
    print(
        f"speed unit {unit / 1e6:.2f} M events/s (before/after {units[0] / 1e6:.2f} / {units[1] / 1e6:.2f}); "
        f"{a.requests} requests x {a.tokens} tokens, concurrency {a.concurrency}; requests/s at the server, medians "
        f"of {a.reps} (normalised to 2.6 M events/s) [runs], steady client CPU a request; ratio = kvbench / bare"
        + ("; clients run together (no CPU figure)" if a.together else "")
    )
    for mode, by_api in results.items():
        for api, by_client in by_api.items():
            print(row(mode, api, by_client, unit))


if __name__ == "__main__":
    main()
