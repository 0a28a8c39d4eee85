"""Timing plans for `kvbench serve`: the Plan a timing source gives each request, and the fixed source."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kvbench.config import ConfigError
from kvbench.target import TargetSpec
from kvbench.units import ms_to_ns, us_to_ns

FIXED_KEYS = ("kind", "ttft_ms", "itl_ms", "prefill_us_per_token", "eos_tokens")


class Plan(NamedTuple):
    ttft_ns: int  # request received -> first token
    itl_ns: int  # between consecutive tokens


Planner = Callable[[int, int, int], Plan]  # (prompt_tokens, cached_tokens, output_tokens) -> Plan


def fixed_planner(spec: TargetSpec) -> tuple[Planner, int]:
    """Plan from `fixed:ttft_ms=..,itl_ms=..[,prefill_us_per_token=..][,eos_tokens=N]`; returns (planner, eos)."""
    p = spec.params
    for key in p:
        if key not in FIXED_KEYS:
            raise ConfigError(
                f"{spec.source}: kvbench serve: unknown fixed target key {key!r}; allowed: {', '.join(FIXED_KEYS[1:])}"
            )
    for key in FIXED_KEYS[1:]:
        v = p.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"{spec.source}: fixed.{key} must be a non-negative number, got {v!r}")
    ttft_ns, itl_ns = ms_to_ns(p.get("ttft_ms", 50.0)), ms_to_ns(p.get("itl_ms", 10.0))
    per_token_ns = us_to_ns(p.get("prefill_us_per_token", 0.0))

    def plan(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> Plan:
        return Plan(ttft_ns + per_token_ns * (prompt_tokens - cached_tokens), itl_ns)

    return plan, int(p.get("eos_tokens", 0))
