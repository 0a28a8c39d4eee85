"""Step-cost models of one engine instance behind one Protocol: roofline (roofline.py), measured profile
(profile.py), exact sums of decode runs (runs.py); config.py builds one from a pool table."""

from __future__ import annotations

from typing import Protocol

from kvbench.sim.cost.runs import Lines
from kvbench.sim.spec import GpuSpec, ModelSpec


class StepCost(Protocol):
    """What an engine step costs, in integer ns; runs of decode steps sum exactly to their single steps."""

    @property
    def model(self) -> ModelSpec: ...

    @property
    def gpu(self) -> GpuSpec: ...

    @property
    def tp(self) -> int: ...

    def prefill_ns(self, new_tokens: int, context_tokens: int = 0) -> int:
        """Compute `new_tokens` after `context_tokens` already in KV (a whole prompt or one chunk of it)."""
        ...

    def decode_step_ns(self, batch: int, kv_tokens: int) -> int:
        """One decode step of `batch` requests holding `kv_tokens` in total (before the step)."""
        ...

    def step_ns(self, prefill_tokens: int, prefill_context: int, batch: int, kv_tokens: int) -> int:
        """A mixed step: a prefill chunk (after prefill_context cached tokens) plus `batch` decoding requests."""
        ...

    def decode_lines(self, batch: int, kv_tokens: int, q: int = 1, growth: int | None = None) -> Lines:
        """A run of steps of `batch` requests computing q tokens each, the KV growing by `growth` per step."""
        ...

    def decode_run_ns(self, batch: int, kv_tokens: int, n_steps: int) -> int:
        """n consecutive decode steps, KV growing by `batch` per step; == the sum of decode_step_ns."""
        ...

    def decode_steps_within(self, batch: int, kv_tokens: int, budget_ns: int) -> int:
        """Largest n with decode_run_ns(batch, kv_tokens, n) <= budget_ns (0 when batch is empty)."""
        ...

    def kv_capacity_tokens(self) -> int:
        """KV tokens the instance holds beside its weights."""
        ...

    def exceeds_hbm(self) -> bool:
        """True when the weights alone do not fit in the usable HBM."""
        ...
