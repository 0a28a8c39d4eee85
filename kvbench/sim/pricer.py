"""Step pricers: what an engine's batch step and run of decode steps cost, plain or with speculative decoding."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from kvbench.sim.cost import StepCost
from kvbench.sim.cost.runs import SHIFT, run_sum
from kvbench.sim.spec import LinkSpec
from kvbench.sim.spec_decode import (
    expected_tokens_per_step,
    sample_accepted,
    spec_run_ns,
    spec_step_ns,
    spec_steps_within,
)


class StepPricer(Protocol):
    """What an engine asks of its steps: a mixed step, a run of decode steps, and how many steps tokens take."""

    cost: StepCost
    kv_per_step: int  # KV tokens each decode step adds per request
    tokens_per_step: int  # tokens computed per request per decode step

    def mixed_ns(self, prefill_tokens: int, prefill_context: int, batch: int, kv_tokens: int) -> int: ...

    def run_ns(self, batch: int, kv_tokens: int, n: int) -> int: ...

    def steps_within(self, batch: int, kv_tokens: int, budget_ns: int) -> int: ...

    def cut(self, batch: int, kv_tokens: int, elapsed_ns: int, n: int) -> tuple[int, int]:
        """(m, run_ns(m)): the steps of a run of n begun by `elapsed_ns` (m == n: not cut; its time unused)."""
        ...

    def steps_for(self, tokens: int) -> int: ...


class PlainPricer:
    """One token per request per decode step; runs priced in closed form by the cost model."""

    __slots__ = ("cost", "mixed_ns", "run_ns", "steps_within", "kv_per_step", "tokens_per_step", "lines_of")

    def __init__(self, cost: StepCost) -> None:
        self.cost = cost
        self.mixed_ns = cost.step_ns  # (prefill_tokens, prefill_context, batch, kv_tokens)
        self.run_ns = cost.decode_run_ns  # (batch, kv_tokens, n_steps)
        self.steps_within = cost.decode_steps_within  # (batch, kv_tokens, budget_ns)
        self.kv_per_step = 1
        self.tokens_per_step = 1
        self.lines_of = cost.decode_lines  # (batch, kv_tokens): the run in closed form

    def steps_for(self, tokens: int) -> int:
        """Decode steps that produce `tokens` tokens."""
        return tokens

    def cut(self, batch: int, kv_tokens: int, elapsed_ns: int, n: int) -> tuple[int, int]:
        """(m, run_ns(m)) for the steps of a run of n that have started by `elapsed_ns` (the one in flight
        included), i.e. the smallest m with run_ns(m) > elapsed. Steps only lengthen as KV grows, so
        elapsed // (last step) and elapsed // (first step) + 1 bracket it tightly; bisect between them. The run's
        lines are computed once: step i is floor(max(a1 + s1*i, a2 + s2*i) / S) + const, the cost model's
        decode_step_ns at that step's KV, and the sums are exact (run_sum)."""
        lines = self.lines_of(batch, kv_tokens)
        a1, s1, a2, s2, const = lines
        hi = elapsed_ns // (((a1 if a1 > a2 else a2) >> SHIFT) + const) + 1
        if hi >= n:
            return n, 0  # not cut: the run's end stands
        i = n - 1
        x1, x2 = a1 + s1 * i, a2 + s2 * i
        lo, hi_ns = elapsed_ns // (((x1 if x1 > x2 else x2) >> SHIFT) + const), -1
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            mid_ns = run_sum(mid, lines)
            if mid_ns > elapsed_ns:
                hi, hi_ns = mid, mid_ns
            else:
                lo = mid
        return hi, hi_ns if hi_ns >= 0 else run_sum(hi, lines)


class SpecPricer:
    """Speculative decoding: each step drafts k tokens and verifies k+1 on the target (REFERENCE §3).

    Tokens per step are sampled per request per step (seeded), so a request's step count is drawn when it
    starts decoding; the batch's KV is taken to grow by round(E[tokens per step]) per request per step.
    A run of n steps is priced exactly (spec_run_ns: the sum of the single speculative steps).
    """

    __slots__ = ("cost", "draft", "link", "k", "acceptance", "rng", "kv_per_step", "tokens_per_step")

    def __init__(
        self,
        cost: StepCost,
        draft: StepCost | None,
        link: LinkSpec | None,
        k: int,
        acceptance: Sequence[float],
        rng: random.Random,
    ) -> None:
        self.cost, self.draft, self.link, self.k = cost, draft, link, k
        self.acceptance = tuple(acceptance)
        self.rng = rng
        self.kv_per_step = max(1, round(expected_tokens_per_step(self.acceptance)))
        self.tokens_per_step = k + 1  # tokens computed per request per step (the verify width)

    def mixed_ns(self, prefill_tokens: int, prefill_context: int, batch: int, kv_tokens: int) -> int:
        p = self.cost.prefill_ns(prefill_tokens, prefill_context)
        return p + (self._step(batch, kv_tokens) if batch else 0)

    def _step(self, batch: int, kv_tokens: int) -> int:
        return spec_step_ns(self.cost, self.draft, self.link, batch, kv_tokens, self.k)

    def run_ns(self, batch: int, kv_tokens: int, n: int) -> int:
        return spec_run_ns(self.cost, self.draft, self.link, batch, kv_tokens, self.k, n, batch * self.kv_per_step)

    def steps_within(self, batch: int, kv_tokens: int, budget_ns: int) -> int:
        return spec_steps_within(
            self.cost, self.draft, self.link, batch, kv_tokens, self.k, budget_ns, batch * self.kv_per_step
        )

    def cut(self, batch: int, kv_tokens: int, elapsed_ns: int, n: int) -> tuple[int, int]:
        m = min(n, self.steps_within(batch, kv_tokens, elapsed_ns) + 1)
        return m, self.run_ns(batch, kv_tokens, m) if m < n else 0

    def steps_for(self, tokens: int) -> int:
        rng, acc, steps = self.rng, self.acceptance, 0
        while tokens > 0:
            tokens -= sample_accepted(rng, acc)
            steps += 1
        return steps
