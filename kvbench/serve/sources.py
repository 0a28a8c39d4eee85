"""The timing source of `kvbench serve --target`: fixed numbers (serve/timing.py) or the simulator (sim_timing.py)."""

from __future__ import annotations

from kvbench.config import ConfigError
from kvbench.serve.sim_timing import sim_planner
from kvbench.serve.timing import Planner, fixed_planner
from kvbench.target import TargetSpec


def planner_for(spec: TargetSpec, seed: int) -> tuple[Planner, int]:
    """(planner, eos_tokens) for a resolved --target: fixed or sim."""
    if spec.kind == "fixed":
        return fixed_planner(spec)
    if spec.kind == "sim":
        return sim_planner(spec, seed), 0
    raise ConfigError(
        f"kvbench serve: --target must be fixed:ttft_ms=..,itl_ms=.. or sim[:PRESET], "
        f"got a {spec.kind!r} target ({spec.source})"
    )
