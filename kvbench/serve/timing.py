"""Timing plans for `kvbench serve`: the Plan a timing source gives each request, and the fixed source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, NamedTuple

from kvbench.config import Range, Source, read
from kvbench.target import TargetSpec
from kvbench.units import ms_to_ns, us_to_ns


class Plan(NamedTuple):
    ttft_ns: int  # request received -> first token
    itl_ns: int  # between consecutive tokens


Planner = Callable[[int, int, int], Plan]  # (prompt_tokens, cached_tokens, output_tokens) -> Plan


@dataclass(frozen=True)
class FixedTiming:
    """`kvbench serve --target fixed:...`: constant TTFT and ITL, plus an optional cost per uncached prompt token."""

    ttft_ms: Annotated[float, Range(0)] = 50.0
    itl_ms: Annotated[float, Range(0)] = 10.0
    prefill_us_per_token: Annotated[float, Range(0)] = 0.0
    eos_tokens: Annotated[int, Range(0)] = 0  # stop after this many tokens unless ignore_eos; 0 = never


def fixed_planner(spec: TargetSpec) -> tuple[Planner, int]:
    """Plan from `fixed:ttft_ms=..,itl_ms=..[,prefill_us_per_token=..][,eos_tokens=N]`; returns (planner, eos)."""
    t = read(FixedTiming, spec.params, Source.of(spec.source), ignore=("kind",))
    ttft_ns, itl_ns, per_token_ns = ms_to_ns(t.ttft_ms), ms_to_ns(t.itl_ms), us_to_ns(t.prefill_us_per_token)

    def plan(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> Plan:
        return Plan(ttft_ns + per_token_ns * (prompt_tokens - cached_tokens), itl_ns)

    return plan, t.eos_tokens
