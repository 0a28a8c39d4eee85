"""Speculative decoding: expected tokens per step by hand, the sampled mean converges, verify/draft costs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_toys import TOY, TOY_GPU

from kvbench.sim import spec
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.spec_decode import (
    draft_message_ns,
    expected_tokens_per_step,
    sample_accepted,
    spec_run_ns,
    spec_step_ns,
    spec_steps_within,
    verify_step_ns,
)

EAGLE3 = [0.58, 0.31, 0.16, 0.08, 0.04]  # REFERENCE §3, EAGLE-3 draft at batch 8


def test_expected_tokens_by_hand() -> None:
    # 1 + 0.58 + 0.58*0.31 + 0.58*0.31*0.16 + 0.58*0.31*0.16*0.08 + ...*0.04
    # = 1 + 0.58 + 0.1798 + 0.028768 + 0.00230144 + 0.0000920576 = 1.7909614976
    assert expected_tokens_per_step(EAGLE3) == pytest.approx(1.7909614976, abs=1e-12)
    assert expected_tokens_per_step([]) == 1.0
    assert expected_tokens_per_step([1.0, 1.0, 1.0]) == 4.0  # every draft token accepted: k + 1


def test_sampled_mean_converges() -> None:
    rng = random.Random(7)
    n = 100_000
    draws = [sample_accepted(rng, EAGLE3) for _ in range(n)]
    assert min(draws) == 1 and max(draws) <= 6
    # standard error ~ 0.75 / sqrt(1e5) = 0.0024; 0.01 is four of them
    assert sum(draws) / n == pytest.approx(1.7909614976, abs=0.01)
    # seeded: the same seed gives the same draws
    rng2 = random.Random(7)
    assert [sample_accepted(rng2, EAGLE3) for _ in range(100)] == draws[:100]


def test_verify_step_hand_computed() -> None:
    c = CostModel(TOY, TOY_GPU)
    # batch 2 holding 100 KV tokens verifies k=3 drafts: 4 tokens each = 8 tokens
    #   pairs = 4 * 100 + 2 * (4*5/2) = 420; KV touched = 100 read + 8 written = 108
    #   compute = (2e6 * 8 + 64 * 420) / 5e11 = 16,026,880 / 5e11 = 32,053.8 ns
    #   memory  = (2e6 + 108 * 32) / 5e10 = 2,003,456 / 5e10 = 40,069.1 ns -> 40,069 + 1200 overheads
    assert verify_step_ns(c, 2, 100, 3) == 41_269
    # a plain decode step of the same batch costs almost as much (memory-bound): (2e6 + 102*32)/5e10 = 40,065.3
    assert c.decode_step_ns(2, 100) == 41_265


def test_draft_message_when_apart() -> None:
    link = spec.link_from({"alpha_ns": 1000, "bytes_per_s": 1e9}, "toy")
    # 2 requests * 3 drafted tokens * 8 B (id + probability) = 48 B: 1000 ns + 48 ns
    assert draft_message_ns(link, 2, 3) == 1048
    assert draft_message_ns(None, 2, 3) == 0


def test_speculation_lowers_time_per_token_at_small_batch() -> None:
    target = CostModel(spec.model("Llama-3-70B"), spec.gpu("H100"), tp=8)
    # a Llama-3.2-1B-shaped draft on its own H100 (its 5 steps cost ~5 x 1.4 ms)
    small = spec.model_from(
        {
            "n_layers": 16,
            "hidden": 2048,
            "n_heads": 32,
            "n_kv_heads": 8,
            "head_dim": 64,
            "params": 1_240_000_000,
            "active_params": 1_240_000_000,
        },
        "draft",
    )
    draft = CostModel(small, spec.gpu("H100"))
    k, kv, tokens = 5, 2000, expected_tokens_per_step([0.8] * 5)  # 1 + .8 + .64 + .512 + .4096 + .32768 = 3.69
    plain = target.decode_step_ns(1, kv)
    assert spec_step_ns(target, draft, spec.link("nvlink-h100"), 1, kv, k) / tokens < plain
    # a free draft (MTP / EAGLE heads folded into the target): per token ~ verify / 3.69
    assert spec_step_ns(target, None, None, 1, kv, k) / tokens < plain / 3
    # at a large batch the verify step turns compute-bound and the gain shrinks
    big = 256
    gain_small = plain / (spec_step_ns(target, None, None, 1, kv, k) / tokens)
    gain_big = target.decode_step_ns(big, big * kv) / (spec_step_ns(target, None, None, big, big * kv, k) / tokens)
    assert gain_big < gain_small


TARGET = CostModel(spec.model("Llama-3-70B"), spec.gpu("H100"), tp=8)
DRAFT = CostModel(spec.model("Llama-3.1-8B"), spec.gpu("H100"))
NVLINK = spec.link("nvlink-h100")


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 512),
    st.integers(0, 10**6),
    st.integers(1, 6),
    st.integers(0, 40),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 10**10),
)
def test_spec_runs_are_exact(batch: int, kv: int, k: int, n: int, per_req: int, apart: bool, budget: int) -> None:
    draft, link = (DRAFT, NVLINK) if apart else (None, None)
    growth = batch * per_req  # KV grows by batch x (tokens emitted per request per step)
    run = spec_run_ns(TARGET, draft, link, batch, kv, k, n, growth)
    assert run == sum(spec_step_ns(TARGET, draft, link, batch, kv + growth * i, k) for i in range(n))
    w = spec_steps_within(TARGET, draft, link, batch, kv, k, budget, growth)
    assert spec_run_ns(TARGET, draft, link, batch, kv, k, w, growth) <= budget
    assert spec_run_ns(TARGET, draft, link, batch, kv, k, w + 1, growth) > budget
