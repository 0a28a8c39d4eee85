"""Speculative decoding: expected and sampled tokens per verify step, and the cost of one speculative step."""

from __future__ import annotations

import random
from collections.abc import Sequence

from kvbench.sim.cost import StepCost
from kvbench.sim.cost.runs import Lines, run_sum, runs_within
from kvbench.sim.spec import LinkSpec
from kvbench.sim.transfer import transfer_ns

# Bytes per drafted token sent draft -> target: a token id (4 B) and its draft probability (4 B).
DRAFT_TOKEN_BYTES = 8


def expected_tokens_per_step(acceptance: Sequence[float]) -> float:
    """1 + a1 + a1*a2 + ... : a_i is the probability that draft position i is accepted given 1..i-1 were."""
    total, run = 1.0, 1.0
    for a in acceptance:
        run *= a
        total += run
    return total


def sample_accepted(rng: random.Random, acceptance: Sequence[float]) -> int:
    """Tokens emitted by one verify step (1..k+1): the accepted draft prefix plus the target's own token."""
    n = 1
    for a in acceptance:
        if rng.random() >= a:
            break
        n += 1
    return n


def verify_step_ns(cost: StepCost, batch: int, kv_tokens: int, k: int) -> int:
    """The target scores k drafted tokens + 1 for each of `batch` requests in one (k+1)-token step.

    Each request's k+1 tokens attend to its context and causally to each other: pairs = (k+1)*K + b*(k+1)(k+2)/2;
    KV touched = K read + b*(k+1) written."""
    if batch <= 0:
        return 0
    return run_sum(1, cost.decode_lines(batch, kv_tokens, k + 1))


def draft_ns(draft: StepCost, batch: int, kv_tokens: int, k: int) -> int:
    """k autoregressive decode steps of the draft model (its KV grows by `batch` per step)."""
    return draft.decode_run_ns(batch, kv_tokens, k)


def draft_message_ns(link: LinkSpec | None, batch: int, k: int) -> int:
    """One draft -> target message per step when they sit on different devices (None: same device, free)."""
    if link is None:
        return 0
    return transfer_ns(link, batch * k * DRAFT_TOKEN_BYTES, 1)


def spec_step_ns(
    target: StepCost,
    draft: StepCost | None,
    link: LinkSpec | None,
    batch: int,
    kv_tokens: int,
    k: int,
    draft_kv_tokens: int | None = None,
) -> int:
    """One speculative step: draft k tokens, send them if apart, verify k+1 tokens on the target.

    draft=None means a draft whose cost is negligible or folded into the target (MTP / EAGLE heads)."""
    d = 0 if draft is None else draft_ns(draft, batch, kv_tokens if draft_kv_tokens is None else draft_kv_tokens, k)
    return d + draft_message_ns(link, batch, k) + verify_step_ns(target, batch, kv_tokens, k)


def _spec_sets(
    target: StepCost, draft: StepCost | None, batch: int, kv_tokens: int, k: int, growth: int
) -> list[Lines]:
    """A speculative step as runs of lines: the (k+1)-token verify, and draft position j with its KV offset b*j."""
    sets = [target.decode_lines(batch, kv_tokens, k + 1, growth)]
    if draft is not None:
        sets += [draft.decode_lines(batch, kv_tokens + batch * j, 1, growth) for j in range(k)]
    return sets


def spec_run_ns(
    target: StepCost,
    draft: StepCost | None,
    link: LinkSpec | None,
    batch: int,
    kv_tokens: int,
    k: int,
    n_steps: int,
    growth: int,
) -> int:
    """n speculative steps with the KV growing by `growth` tokens per step (e.g. batch x round(E[tokens/step])):
    exactly the sum of spec_step_ns over the steps, in O(k log)."""
    if batch <= 0 or n_steps <= 0:
        return 0
    sets = _spec_sets(target, draft, batch, kv_tokens, k, growth)
    return sum(run_sum(n_steps, ln) for ln in sets) + n_steps * draft_message_ns(link, batch, k)


def spec_steps_within(
    target: StepCost,
    draft: StepCost | None,
    link: LinkSpec | None,
    batch: int,
    kv_tokens: int,
    k: int,
    budget_ns: int,
    growth: int,
) -> int:
    """Largest n with spec_run_ns(..., n, growth) <= budget_ns (0 if the first step does not fit)."""
    if batch <= 0:
        return 0
    sets = _spec_sets(target, draft, batch, kv_tokens, k, growth)
    return runs_within(budget_ns, sets, draft_message_ns(link, batch, k))
