"""The roofline's shape terms, hand-computed: GEMM/weight-read serial share, attention and expert efficiencies,
distinct routed experts read per step, fixed MLA / MoE layer costs, the all-reduce link per GPU generation."""

from __future__ import annotations

import dataclasses

from support.sim_toys import MOE, SHAPE, TOY

from kvbench.sim import spec
from kvbench.sim.cost.parallel import default_allreduce_link
from kvbench.sim.cost.roofline import CostModel

# toy GPU: 1e12 FLOP/s (GEMMs at 0.5 -> 5e11, attention at 0.25 -> 2.5e11, routed experts at 0.1 -> 1e11);
# 1e11 B/s at mbu 0.5 -> 5e10; 1000 ns/step + 100 ns/layer, + 1000 per MLA layer, + 2000 per MoE layer
GPU = spec.gpu_from(
    {
        "flops_per_s": 1e12,
        "hbm_bytes": 10_000_000,
        "hbm_bytes_per_s": 1e11,
        "mfu": 0.5,
        "mbu": 0.5,
        "attn_mfu": 0.25,
        "moe_mfu": 0.1,
        "gemm_serial": 0.5,
        "step_overhead_ns": 1000,
        "layer_overhead_ns": 100,
        "mla_layer_ns": 1000,
        "moe_layer_ns": 2000,
    },
    "toy-gpu",
)
# DENSE: 1e6 params (2e6 B), KV 32 B/token, 64 attention FLOPs per pair; MOE: 2e5 dense + 8 experts of 1e5, 2 a token
DENSE = TOY


def test_prefill_gemm_serial_and_attention_efficiency() -> None:
    c = CostModel(DENSE, GPU)
    # 100 tokens: GEMM compute 2e6 * 100 / 5e11 = 400,000 ns, weights 2e6 B / 5e10 = 40,000 ns
    #   -> 400,000 + 0.5 * 40,000 = 420,000 ns
    # attention: 5050 pairs * 64 / 2.5e11 = 1,292.8 ns (KV 3200 B / 5e10 = 64 ns) -> 1,292.8 ns
    # + 1000 + 2 * 100 (dense, not MLA: no MoE / MLA layer costs) = 422,492
    assert c.prefill_ns(100) == 420_000 + 1292 + 1200


def test_moe_reads_the_expected_distinct_experts() -> None:
    c = CostModel(MOE, GPU)
    # batch 1, 1000 KV: weights 2e5 + 8e5 * (1 - (1 - 2/8)^1 = 0.25) = 4e5 params * 2 B / 5e10 = 16,000 ns;
    #   compute 2 * (2e5 / 5e11 + 2e5 / 1e11) s = 4,800 ns -> 16,000 + 0.5 * 4,800 = 18,400 ns
    #   attention: KV 1001 * 32 B / 5e10 = 640.64 ns (compute 1001 * 64 / 2.5e11 = 256.3 ns)
    #   + 1000 + 2 * (100 + 2000 MoE) = 5,200 -> floor(19,040.64) + 5,200
    assert c.decode_step_ns(1, 1000) == 19_040 + 5_200
    # batch 4: experts read 1 - 0.75^4 = 0.68359375 of 8e5 = 546,875 params; + 2e5 = 746,875 * 2 B / 5e10
    #   = 29,875 ns; compute 4 * 4,800 = 19,200 ns -> 29,875 + 9,600 = 39,475; KV 1004 * 32 / 5e10 = 642.56 ns
    assert c.decode_step_ns(4, 1000) == 40_117 + 5_200
    # prefill of 1000 tokens reads every expert (0.75^1000 ~ 0): 2e6 B / 5e10 = 40,000 ns of weights;
    #   compute 1000 * 4,800 ns = 4,800,000 ns -> 4,800,000 + 0.5 * 40,000 = 4,820,000 ns
    #   attention 500,500 pairs * 64 / 2.5e11 = 128,128 ns (KV 32,000 B / 5e10 = 640 ns)
    assert abs(c.prefill_ns(1000) - (4_820_000 + 128_128 + 5_200)) <= 1  # coefficients rounded to 1/S ns


def test_mla_and_moe_layer_costs_apply_to_their_models_only() -> None:
    mla = spec.model_from(
        {**SHAPE, "params": 1_000_000, "active_params": 1_000_000, "mla_latent": 4, "mla_rope": 2}, "m"
    )
    plain = dataclasses.replace(GPU, mla_layer_ns=0, moe_layer_ns=0)
    assert CostModel(mla, GPU).decode_step_ns(1, 10) - CostModel(mla, plain).decode_step_ns(1, 10) == 2 * 1000
    assert CostModel(MOE, GPU).decode_step_ns(1, 10) - CostModel(MOE, plain).decode_step_ns(1, 10) == 2 * 2000
    assert CostModel(DENSE, GPU).decode_step_ns(1, 10) == CostModel(DENSE, plain).decode_step_ns(1, 10)


def test_decode_runs_stay_exact_with_shape_terms() -> None:
    for m in (DENSE, MOE):
        c = CostModel(m, GPU)
        for batch in (1, 3, 8):
            steps = [c.decode_step_ns(batch, 500 + batch * i) for i in range(40)]
            assert c.decode_run_ns(batch, 500, 40) == sum(steps)
            assert c.decode_steps_within(batch, 500, sum(steps[:17])) == 17


def test_default_allreduce_link_per_generation() -> None:
    names = {g: default_allreduce_link(spec.gpu(g)).name for g in ("A100-80GB", "A800", "H100", "H200", "B200")}
    assert names == {
        "A100-80GB": "allreduce-a100",
        "A800": "allreduce-a100",
        "H100": "allreduce-h100",
        "H200": "allreduce-h100",
        "B200": "allreduce-b200",
    }
