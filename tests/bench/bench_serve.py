"""Benchmark: how closely `kvbench serve --target fixed:ttft_ms=50,itl_ms=10` keeps its schedule, seen by a client.

Run: python tests/bench/bench_serve.py [--requests 64] [--tokens 20] [--reps 3]
For concurrency 1 and 32 it streams requests from one aiohttp+uvloop client and prints, as the median over
repetitions, the p50/p99 of (observed TTFT - 50 ms) and of (observed token gap - 10 ms). The figures include the
client's own delay (both run on the same 2 cores), so they bound the server's lateness from above; the server's
own lateness (token written after its deadline, from its /metrics) is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.serve_proc import start_serve  # noqa: E402

from kvbench.devservers.llamacpp import stop  # noqa: E402

TTFT_NS, ITL_NS = 50_000_000, 10_000_000


def server_lateness(url: str) -> tuple[float, float]:
    """(sum of token lateness in s, tokens generated) from the server's /metrics."""
    import urllib.request

    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as r:
        v = {ln.split()[0]: float(ln.split()[1]) for ln in r.read().decode().splitlines() if ln[:1] != "#"}
    return v["kvbench:token_lateness_seconds_sum"], v["kvbench:generation_tokens_total"]


def pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1e6


async def one(session, url: str, tokens: int, ttft: list[int], gaps: list[int]) -> None:
    body = {"prompt": "bench", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    t0 = time.monotonic_ns()
    last = None
    async with session.post(url + "/completions", json=body) as r:
        async for raw in r.content:
            if not raw.startswith(b"data: {") or b'"text":""' in raw:
                continue
            now = time.monotonic_ns()
            if last is None:
                ttft.append(now - t0 - TTFT_NS)
            else:
                gaps.append(now - last - ITL_NS)
            last = now


async def run(url: str, concurrency: int, n: int, tokens: int) -> tuple[list[int], list[int]]:
    import aiohttp

    ttft: list[int] = []
    gaps: list[int] = []
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def guarded():
            async with sem:
                await one(s, url, tokens, ttft, gaps)

        await asyncio.gather(*(guarded() for _ in range(n)))
    return ttft, gaps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    proc, url = start_serve("--target", "fixed:ttft_ms=50,itl_ms=10")
    try:
        for c in (1, 32):
            rows = []
            late0, tok0 = server_lateness(url)
            for _ in range(a.reps):
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    ttft, gaps = runner.run(run(url, c, a.requests, a.tokens))
                rows.append((pct(ttft, 0.5), pct(ttft, 0.99), pct(gaps, 0.5), pct(gaps, 0.99)))
            med = [statistics.median(col) for col in zip(*rows)]
            late1, tok1 = server_lateness(url)
            server_ms = (late1 - late0) / max(tok1 - tok0, 1) * 1e3
            print(
                f"concurrency {c:>2}: client-seen TTFT - 50 ms p50 {med[0]:+.2f} ms p99 {med[1]:+.2f} ms | "
                f"gap - 10 ms p50 {med[2]:+.2f} ms p99 {med[3]:+.2f} ms | server's own lateness mean "
                f"{server_ms:.3f} ms/token  ({a.requests} requests x {a.tokens} tokens, median of {a.reps})"
            )
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
