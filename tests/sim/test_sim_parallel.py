"""Parallel layouts of an instance, hand-computed: expert parallelism (all-to-all per link), FP8, pipeline stages with
their bubble, DP attention's collectives, and the memory each layout holds."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_toys import MOE, TOY, TOY_GPU

from kvbench.config import ConfigError
from kvbench.sim import spec
from kvbench.sim.cost.roofline import CostModel

# the toys of tests/support/sim_toys.py (DENSE: 1e6 params, 2e6 B bf16, KV 32 B/token, 64 FLOPs/pair, 16 B of
# activations a token; MOE: 2e5 dense params + 8 experts of 1e5, 2 a token) on the toy GPU (5e11 FLOP/s and 5e10 B/s
# reached, 1000 ns/step + 100 ns/layer, plain roofline) with an FP8 peak of 2e12 (mfu 0.5 -> 1e12)
GPU = dataclasses.replace(TOY_GPU, fp8_flops_per_s=2e12)
DENSE = TOY
NEAR = spec.link_from({"alpha_ns": 1000, "bytes_per_s": 1e9}, "near")  # 1 B/ns
FAR = spec.link_from({"alpha_ns": 2000, "bytes_per_s": 1e8}, "far")  # 0.1 B/ns


def ep4(**kw: object) -> CostModel:
    return CostModel(MOE, GPU, ep=4, gpus_per_node=2, ep_link=FAR, ep_intra_link=NEAR, **kw)  # type: ignore[arg-type]


def test_expert_parallel_decode_step() -> None:
    c = ep4()
    # batch 8, 1000 KV, 4 GPUs in 4 DP attention groups (tp 1):
    #   compute 2 * 4e5 * 8 / (5e11 * 4) = 3,200 ns; weights: dense 2e5 * 2 B whole on every GPU = 4e5 B, experts
    #   8e5 * 2 B / 4 GPUs * (1 - 0.75^8 = 0.8998871) = 359,954.8 B -> 759,954.8 B / 5e10 = 15,199.1 ns (memory-bound)
    #   all-to-all per token and layer: dispatch 2 experts x 16 B + combine 2 x 16 B = 64 B; 1 of 4 destinations on
    #   the node (16 B / 1 B/ns = 16 ns), 2 of 4 on other nodes (32 B / 0.1 = 320 ns): 320 ns; a rank holds
    #   8 / 4 tokens: 2 layers x 320 x 2 = 1,280 ns; latency 2 layers x 2 all-to-alls x 2000 = 8,000 ns
    #   attention: KV (1000 + 8) x 32 B / 4 groups = 8,064 B / 5e10 = 161.28 ns (FLOPs 1008 x 64 / 2e12 = 32 ns)
    #   15,199.1 + 1,280 + 161.28 = 16,640.4 -> + 1000 + 200 + 8,000
    assert abs(c.decode_step_ns(8, 1000) - (16_640 + 9_200)) <= 1


def test_expert_parallel_memory() -> None:
    # weights: dense 4e5 B on each of the 4 groups (1.6e6) + experts 1.6e6 once = 3.2e6 B; usable 0.9 x 4e7 = 3.6e7
    # KV 32 B a token held once (its group's GPU): (3.6e7 - 3.2e6) / 32 = 1,025,000 tokens
    assert ep4().kv_capacity_tokens() == 1_025_000
    assert ep4().weight_bytes() == 3_200_000


def test_all_to_all_within_a_node_uses_only_the_intra_link() -> None:
    c = CostModel(MOE, GPU, ep=2, gpus_per_node=8, ep_link=FAR, ep_intra_link=NEAR)
    # 1 of 2 destinations is the other GPU of the node: 32 B / 1 B/ns = 32 ns a token a layer; a rank holds 4 of 8
    #   tokens: 2 x 32 x 4 = 256 ns; latency 2 layers x 2 x 1000 = 4,000 ns
    #   weights 4e5 + 8e5 (1.6e6 B / 2 GPUs) x 0.8998871 = 1,119,909.7 B / 5e10 = 22,398.2 ns (compute 6,400)
    #   attention: KV 1008 x 32 B / 2 groups = 16,128 B / 5e10 = 322.56 ns
    #   22,398.2 + 256 + 322.56 = 22,976.8 -> + 1000 + 200 + 4,000
    assert abs(c.decode_step_ns(8, 1000) - (22_976 + 5_200)) <= 1


def test_fp8_halves_compute_and_weights() -> None:
    bf16, fp8 = CostModel(DENSE, GPU), CostModel(DENSE, GPU, fp8=True)
    # prefill 100: compute 2e6 x 100 / 5e11 = 400,000 ns (bf16) vs / 1e12 = 200,000 (fp8); weights 40,000 / 20,000;
    #   attention 5050 x 64 / 5e11 = 646.4 ns (stays bf16); + 1200
    assert bf16.prefill_ns(100) == 400_000 + 646 + 1200
    assert fp8.prefill_ns(100) == 200_000 + 646 + 1200
    # capacity: (9e6 - 2e6) / 32 = 218,750 vs (9e6 - 1e6) / 32 = 250,000
    assert (bf16.kv_capacity_tokens(), fp8.kv_capacity_tokens()) == (218_750, 250_000)


def test_fp8_needs_fp8_tensor_cores() -> None:
    with pytest.raises(ConfigError, match="no FP8"):
        CostModel(DENSE, spec.gpu("A100-80GB"), fp8=True)


def test_pipeline_stages_and_bubble() -> None:
    c = CostModel(DENSE, GPU, pp=2, pp_link=NEAR)
    # 2 stages, 2 micro-batches: 3 slots of one micro-batch over one stage (1 layer): bubble 1/3
    #   prefill 100 -> micro-batches of 50: GEMMs 2e6 x 50 / 5e11 / 2 stages = 100,000 ns a slot -> 300,000
    #   activations 50 x 16 B / 1 B/ns = 800 ns a slot -> 2,400; attention 646.4 x 3 / (2 x 2) = 484.8
    #   fixed: 1000 + 3 slots x (1 layer x 100 + the link's 1000 latency) = 4,300
    assert c.prefill_ns(100) == 300_000 + 2_400 + 484 + 4_300
    # 4 micro-batches: 5 slots of 25 tokens (bubble 1/5): GEMMs 2e6 x 25 / 5e11 / 2 stages x 5 = 250,000;
    #   activations 400 x 5 = 2,000; attention 646.4 x 5 / (4 x 2) = 404; fixed 1000 + 5 x 1100 = 6,500
    c4 = CostModel(DENSE, GPU, pp=2, microbatches=4, pp_link=NEAR)
    assert abs(c4.prefill_ns(100) - (250_000 + 2_000 + 404 + 6_500)) <= 1  # fixed-point rounding
    # memory: two GPUs, (0.9 x 2e7 - 2e6) / 32 = 500,000 tokens
    assert c.kv_capacity_tokens() == 500_000


def test_plain_layout_is_unchanged_by_the_new_fields() -> None:
    a, b = CostModel(DENSE, GPU), CostModel(DENSE, GPU, ep=1, pp=1, microbatches=3, gpus_per_node=2)
    assert [a.prefill_ns(n) for n in (1, 100, 5000)] == [b.prefill_ns(n) for n in (1, 100, 5000)]
    assert a.decode_run_ns(7, 999, 50) == b.decode_run_ns(7, 999, 50)


def test_deepseek_fits_an_ep32_unit_but_not_one_node() -> None:
    m, h800 = spec.model("DeepSeek-V3"), spec.gpu("H800")
    with pytest.raises(ConfigError, match="does not fit in tp=8 x H800"):
        CostModel(m, h800, tp=8).kv_capacity_tokens()  # 671 GB of FP8 weights > 0.9 x 640 GB
    c = CostModel(m, h800, ep=32, fp8=True)
    # weights: dense 671e9 - 653,908,770,816 = 17,091,229,184 params (1 B) on each of 32 DP ranks
    #   = 546,919,333,888 B, + the experts once 653,908,770,816 = 1,200,828,104,704 B
    # usable 0.9 x 80e9 x 32 = 2.304e12; KV 70,272 B a token held once: 1,103,171,895,296 / 70,272 = 15,698,598
    assert c.kv_capacity_tokens() == 15_698_598


def test_ep_needs_a_moe_model_and_a_multiple_of_tp() -> None:
    with pytest.raises(ConfigError, match="ep = 2 needs a MoE model"):
        CostModel(DENSE, GPU, ep=2)
    with pytest.raises(ConfigError, match="multiple"):
        CostModel(MOE, GPU, tp=2, ep=3)


LAYOUTS = [ep4(), ep4(fp8=True), CostModel(DENSE, GPU, pp=3, pp_link=NEAR), CostModel(MOE, GPU, tp=2, ep=4, pp=2)]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(LAYOUTS), st.integers(1, 512), st.integers(0, 200_000), st.integers(0, 100))
def test_decode_run_is_the_sum_of_steps_for_every_layout(c: CostModel, batch: int, kv: int, n: int) -> None:
    assert c.decode_run_ns(batch, kv, n) == sum(c.decode_step_ns(batch, kv + batch * i) for i in range(n))
