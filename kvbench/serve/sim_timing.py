"""Timing for `kvbench serve --target sim[:PRESET]`: each request priced by a one-request run of the simulator.

Design (the simplest honest one): for every incoming request a fresh simulated cluster of the preset serves that
request alone, in virtual time; its FIRST_TOKEN time becomes the TTFT and its mean token gap the ITL, and the
real server then streams on that schedule. So the timing reflects the preset's model, GPUs, parallelism, PD
split and KV transfer, but NOT the load of other concurrent requests (no queueing or batching interference), and
the sim's prefix cache starts cold: prompt tokens that kvbench serve's own prefix cache reports as cached are
left out of the simulated prompt (the sim prices the uncached part as a fresh prefill). Results are memoised
per (uncached prompt tokens, output tokens), so a sim run happens once per distinct shape.
"""

from __future__ import annotations

from pathlib import Path

from kvbench.records import FIRST_TOKEN, LAST_TOKEN, TERMINAL, Request
from kvbench.serve.timing import Plan, Planner
from kvbench.target import RunContext, TargetSpec
from kvbench.targets import build

MEMO_ENTRIES = 65_536


class _Discard:
    """A table writer that keeps nothing: the one-request runs' steps tables are not wanted."""

    def append(self, row: tuple) -> None:
        pass

    def extend(self, rows) -> None:
        pass


class _NoLog:
    def table(self, name: str) -> _Discard:
        return _Discard()


def simulate_one(spec: TargetSpec, seed: int, prompt_tokens: int, output_tokens: int) -> Plan:
    """TTFT and mean ITL of one request alone on a fresh simulated cluster (virtual time)."""
    target = build(spec, RunContext(seed, Path("."), _NoLog()))  # type: ignore[arg-type]
    seen: dict[str, int] = {}
    end: list[tuple] = []

    def emit(ev: tuple) -> None:
        kind = ev[2]
        if kind in (FIRST_TOKEN, LAST_TOKEN):
            seen[kind] = ev[0]
        elif kind in TERMINAL:
            end.append(ev)

    target.submit(Request(0, 0, max(prompt_tokens, 1), output_tokens), 0)
    target.run(emit)
    if not end or end[0][2] != "FINISH" or FIRST_TOKEN not in seen:
        detail = end[0][8] if end else "no terminal event"
        raise RuntimeError(f"simulated request did not finish: {detail}")
    first = seen[FIRST_TOKEN]
    itl = (seen.get(LAST_TOKEN, first) - first) // max(output_tokens - 1, 1)
    return Plan(first, itl)


def sim_planner(spec: TargetSpec, seed: int) -> Planner:
    """A planner backed by `simulate_one`, memoised per (uncached prompt tokens, output tokens)."""
    memo: dict[tuple[int, int], Plan] = {}
    simulate_one(spec, seed, 16, 2)  # fail at start-up, not on the first request, if the preset cannot run

    def plan(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> Plan:
        key = (prompt_tokens - cached_tokens, output_tokens)
        p = memo.get(key)
        if p is None:
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            p = memo[key] = simulate_one(spec, seed, *key)
        return p

    return plan
