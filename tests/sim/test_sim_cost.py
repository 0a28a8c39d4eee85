"""Roofline cost model: KV sizes, hand-computed prefill/decode/verify steps, TP, MoE, capacity, exact decode runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_toys import TOY, TOY_GPU, TOY_GPU_TABLE, TOY_TABLE

from kvbench.config import ConfigError
from kvbench.sim import spec
from kvbench.sim.cost.config import cost_model
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.cost.runs import floor_sum
from kvbench.sim.pricer import PlainPricer

KiB = 1024


@pytest.mark.parametrize(
    "name, kib",
    [
        ("Llama-3.1-8B", 128),  # 2 (K,V) * 32 layers * 8 kv heads * 128 dim * 2 B = 131072 B = 128 KiB
        ("Llama-3-70B", 320),  # 2 * 80 * 8 * 128 * 2 = 327680 B = 320 KiB
        ("Qwen3-8B", 144),  # 2 * 36 * 8 * 128 * 2 = 147456 B = 144 KiB
        ("Qwen3-32B", 256),  # 2 * 64 * 8 * 128 * 2 = 262144 B = 256 KiB
        ("OPT-13B", 800),  # MHA: 2 * 40 * 40 * 128 * 2 = 819200 B = 800 KiB
        ("OPT-66B", 2304),  # MHA: 2 * 64 * 72 * 128 * 2 = 2359296 B = 2.25 MiB
        ("DeepSeek-V3", 68.625),  # MLA: 61 layers * (512 latent + 64 rope) * 2 B = 70272 B = 68.625 KiB (~68.6)
    ],
)
def test_kv_bytes_per_token(name: str, kib: float) -> None:
    assert spec.model(name).kv_bytes_per_token() == kib * KiB


# The toys (tests/support/sim_toys.py): TOY 2 layers, 1e6 params (2e6 B), KV 32 B/token, 64 FLOPs/pair; TOY_GPU
# 5e11 FLOP/s and 5e10 B/s reached, 1000 ns/step + 100 ns/layer.
# all-reduce link: 1000 ns per message, 1e10 B/s
TOY_LINK = spec.link_from({"alpha_ns": 1000, "bytes_per_s": 1e10}, "toy-link")


def test_toy_shapes() -> None:
    assert TOY.kv_bytes_per_token() == 32
    assert TOY.attn_flops_per_pair() == 64


def test_prefill_hand_computed() -> None:
    c = CostModel(TOY, TOY_GPU)
    # 100 new tokens, no context: FLOPs = 2*1e6*100 + 64 * (100*101/2 = 5050 causal pairs) = 200,323,200
    #   compute = 200,323,200 / 5e11 s = 400,646.4 ns
    #   memory  = (2e6 weight B + 100 tokens * 32 B) / 5e10 = 40,064 ns  -> compute-bound
    # step = floor(400,646.4) + 1000 + 2*100 = 401,846 ns
    assert c.prefill_ns(100) == 401_846
    # the same 100 tokens after 1000 cached ones: pairs = 100*1000 + 5050 = 105,050
    #   FLOPs = 2e8 + 64*105,050 = 206,723,200 -> 413,446.4 ns; + 1200 = 414,646
    assert c.prefill_ns(100, 1000) == 414_646


def test_decode_step_hand_computed() -> None:
    c = CostModel(TOY, TOY_GPU)
    # batch 4 holding 1000 KV tokens: each new token attends to its context and itself: pairs = 1000 + 4
    #   compute = (2*1e6*4 + 64*1004) / 5e11 = 8,064,256 / 5e11 s = 16,128.5 ns
    #   memory  = (2e6 weight B + 1004 * 32 B) / 5e10 = 2,032,128 / 5e10 s = 40,642.56 ns -> memory-bound
    # step = 40,642 + 1200 = 41,842 ns
    assert c.decode_step_ns(4, 1000) == 41_842
    # a mixed step equals the pure steps at its two ends
    assert c.step_ns(0, 0, 4, 1000) == 41_842
    assert c.step_ns(100, 1000, 0, 0) == c.prefill_ns(100, 1000)
    assert c.decode_step_ns(0, 1000) == 0 and c.prefill_ns(0) == 0


def test_mixed_step_hand_computed() -> None:
    c = CostModel(TOY, TOY_GPU)
    # chunk of 10 after 20 cached + batch 2 holding 50: tokens 12; pairs 10*20 + 55 + 52 = 307; KV 30 + 52 = 82
    #   GEMMs: compute 2e6*12 / 5e11 = 48,000 ns, weights 2e6 / 5e10 = 40,000 ns -> compute-bound, 48,000
    #   attention: compute 64*307 / 5e11 = 39.3 ns, KV 82*32 / 5e10 = 52.48 ns -> memory-bound, 52.48
    #   (separate kernels: the attention's KV read does not hide under the GEMMs' compute)
    assert c.step_ns(10, 20, 2, 50) == 48_052 + 1200


def test_tensor_parallel_hand_computed() -> None:
    c = CostModel(TOY, TOY_GPU, tp=2, allreduce_link=TOY_LINK)
    # per GPU: compute 8,064,256/2 FLOPs -> 8,064.3 ns; memory: weights 2e6/2 B + KV 1004*32 B (1 KV head cannot
    #   be split: kv_div = min(tp=2, kv_heads=1) = 1) = 1,032,128 B / 5e10 = 20,642.56 ns
    # all-reduce: 2 per layer x 2 layers, each 1000 ns + 2*(2-1)/2 * (4 tokens * 8 hidden * 2 B) / 1e10 s
    #   = 4 * (1000 + 6.4) ns = 4000 ns of alphas (a constant) + 25.6 ns of bytes (floored with the roofline term)
    # step = floor(20,642.56 + 25.6 = 20,668.16) + 1200 + 4000
    assert c.decode_step_ns(4, 1000) == 20_668 + 1200 + 4000


def test_moe_reads_only_touched_experts() -> None:
    moe = spec.model_from(
        {
            "n_layers": 2,
            "hidden": 8,
            "n_heads": 2,
            "n_kv_heads": 1,
            "head_dim": 4,
            "params": 1_000_000,
            "active_params": 100_000,
        },
        "toy-moe",
    )
    c = CostModel(moe, TOY_GPU)
    # batch 4: weights read = min(1e6, 4 * 1e5) params * 2 B = 8e5 B; + KV 1004*32 = 32,128 B -> 832,128 / 5e10
    #   = 16,642.56 ns; compute (2*1e5*4 + 64*1004) / 5e11 = 864,256 / 5e11 = 1,728.5 ns
    assert c.decode_step_ns(4, 1000) == 16_642 + 1200
    # batch 20: min(1e6, 2e6) -> all 1e6 params = 2e6 B; KV (1000+20)*32 = 32,640 -> 2,032,640 / 5e10 = 40,652.8
    assert c.decode_step_ns(20, 1000) == 40_652 + 1200


def test_capacity_and_dp_attention() -> None:
    # 0.9 * 1e7 HBM - 2e6 weights = 7e6 B / 32 B per token = 218,750 tokens
    assert CostModel(TOY, TOY_GPU).kv_capacity_tokens() == 218_750
    # tp=2: 0.9 * 2e7 - 2e6 = 1.6e7 B; the single KV head is held on both GPUs: 32 * 2 = 64 B/token -> 250,000
    assert CostModel(TOY, TOY_GPU, tp=2, allreduce_link=TOY_LINK).kv_capacity_tokens() == 250_000
    # DP attention: each rank holds its own requests' KV once: 32 B/token -> 500,000
    dp = CostModel(TOY, TOY_GPU, tp=2, allreduce_link=TOY_LINK, dp_attention=True)
    assert dp.kv_capacity_tokens() == 500_000
    # ... and reads only its share of the KV per step: memory = (1e6 + 1004*32/2) / 5e10 = 1,016,064/5e10
    #   = 20,321.28 ns (compute 8,064.3 ns); its attention needs no all-reduce, the TP MLP gathers and scatters
    #   the ranks' tokens (one all-reduce's bytes: 12.8 ns, half the 25.6 of plain TP, two latencies per layer)
    #   -> floor(20,334.08); + 1200 + 4000 alphas
    assert dp.decode_step_ns(4, 1000) == 20_334 + 1200 + 4000


def test_deepseek_dp_attention_multiplies_capacity_by_tp() -> None:
    tp8 = CostModel(spec.model("DeepSeek-V3"), spec.gpu("H200"), tp=8)
    dp8 = CostModel(spec.model("DeepSeek-V3"), spec.gpu("H200"), tp=8, dp_attention=True)
    # the MLA latent is replicated on all 8 TP ranks, held once with DP attention (floors may differ by 1 token)
    assert abs(dp8.kv_capacity_tokens() - 8 * tp8.kv_capacity_tokens()) <= 8
    # usable 0.9 * 8 * 141e9 = 1015.2e9 B - 671e9 (fp8 weights) = 344.2e9 B; / 70,272 B = 4,898,110 tokens
    assert dp8.kv_capacity_tokens() == 4_898_110


def test_catalog_model_decode_is_bandwidth_bound() -> None:
    c = CostModel(spec.model("Llama-3.1-8B"), spec.gpu("H100"))
    # batch 1, 1000 KV (H100: mfu 0.79, attn_mfu 0.53, mbu 0.90, gemm_serial 0.42, 32 layers x 42 us):
    #   GEMMs: weights 16.06e9 B / (3.35e12 * 0.9) = 5,326,700 ns; compute 2 * 8.03e9 / (989e12 * 0.79) = 20,555 ns
    #     -> 5,326,700 + 0.42 * 20,555 = 5,335,333 ns
    #   attention: KV 1001 * 131,072 B / 3.015e12 = 43,517 ns; compute 524,288 * 1001 / (989e12 * 0.53) = 1,001 ns
    #   + 32 * 42,000 = 1,344,000 -> 6,722,850 (+-2 for fixed-point rounding)
    assert abs(c.decode_step_ns(1, 1000) - 6_722_850) <= 2


def test_exceeds_hbm_is_a_config_error() -> None:
    c = CostModel(spec.model("Llama-3-70B"), spec.gpu("H100"))  # 141 GB of weights, 72 GB usable
    assert c.exceeds_hbm()
    with pytest.raises(ConfigError, match="does not fit"):
        c.kv_capacity_tokens()


def test_floor_sum_matches_loop() -> None:
    for n, m, a, b in [(0, 7, 3, 2), (10, 7, 3, 2), (1000, 13, 100, 999), (5, 1, 0, 0), (37, 10**12, 10**13, 5)]:
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


COSTS = [
    CostModel(spec.model("Llama-3.1-8B"), spec.gpu("H100")),
    CostModel(spec.model("Llama-3-70B"), spec.gpu("A100-80GB"), tp=8),
    CostModel(spec.model("DeepSeek-V3"), spec.gpu("H200"), tp=8, dp_attention=True),
    CostModel(TOY, TOY_GPU),
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COSTS), st.integers(1, 1024), st.integers(0, 2_000_000), st.integers(0, 200))
def test_decode_run_is_the_sum_of_steps(c: CostModel, batch: int, kv: int, n: int) -> None:
    assert c.decode_run_ns(batch, kv, n) == sum(c.decode_step_ns(batch, kv + batch * i) for i in range(n))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COSTS), st.integers(1, 1024), st.integers(0, 2_000_000), st.integers(0, 10**11))
def test_decode_steps_within_is_the_inverse(c: CostModel, batch: int, kv: int, budget: int) -> None:
    n = c.decode_steps_within(batch, kv, budget)
    assert c.decode_run_ns(batch, kv, n) <= budget < c.decode_run_ns(batch, kv, n + 1)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(COSTS), st.integers(1, 512), st.integers(0, 2_000_000), st.integers(2, 200), st.integers(0, 10**10)
)
def test_cutting_a_run_keeps_the_steps_begun(c: CostModel, batch: int, kv: int, n: int, elapsed: int) -> None:
    # the steps begun by `elapsed` (the smallest m whose sum exceeds it) and their exact total; a cut that the
    # first step's bracket puts at or past the run's end leaves the run as it is
    steps = [c.decode_step_ns(batch, kv + batch * i) for i in range(n)]
    m, m_ns = PlainPricer(c).cut(batch, kv, elapsed, n)
    if elapsed // steps[0] + 1 >= n:
        assert m == n
    else:
        assert m == next(k for k in range(1, n + 1) if sum(steps[:k]) > elapsed)
        assert m_ns == sum(steps[:m])


@pytest.mark.parametrize(
    "cfg, match",
    [
        (
            {"model": "Llama-9", "gpu": "H100"},
            r"x.toml \[pool.p\] key 'model': unknown model 'Llama-9'; known: Llama-3.1-8B",
        ),
        ({"model": "Qwen3-8B", "gpu": "V100"}, r"key 'gpu': unknown gpu 'V100'; known: A100-80GB, A800, H100"),
        (
            {"model": "Qwen3-8B", "gpu": "H100", "tp": 16},
            r"key 'tp' = 16 exceeds gpus_per_node = 8; allowed: 1, 2, 4, 8",
        ),
        ({"model": "Qwen3-8B", "gpu": "H100", "tp": 3}, r"key 'tp' = 3 must divide n_heads = 32"),
        ({"model": "Llama-3-70B", "gpu": "H100", "tp": 1}, r"does not fit in tp=1 x H100"),
        ({"model": "Qwen3-8B", "gpu": "H100", "mbu": 0}, r"key 'mbu' = 0 is zero"),
        ({"model": "Qwen3-8B", "gpu": "H100", "mem_fraction": 1.5}, r"key 'mem_fraction' = 1.5: expected a number in"),
        ({"model": "Qwen3-8B", "gpu": "H100", "tp": 2, "allreduce_link": "nvlink-z"}, r"unknown link 'nvlink-z'"),
        (
            {"model": "Qwen3-8B", "gpu": {"flops_per_s": 1e15, "hbm_bytes": 8e10, "hbm_bytes_per_s": 0}},
            r"key 'hbm_bytes_per_s' = 0 is zero",
        ),
        ({"gpu": "H100"}, r"missing key 'model'"),
    ],
)
def test_bad_pool_config(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        cost_model(cfg, "x.toml [pool.p]")
    assert "\n" not in str(e.value) and str(e.value).startswith("x.toml [pool.p]")


def test_pool_config_overrides_and_inline_specs() -> None:
    c = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "mfu": 0.25, "step_overhead_ns": 0}, "p")
    assert c.gpu.mfu == 0.25 and c.gpu.step_overhead_ns == 0 and c.gpu.mbu == spec.gpu("H100").mbu
    inline = cost_model(
        {"model": dict(TOY_TABLE), "gpu": dict(TOY_GPU_TABLE)},
        "p",
    )
    assert inline.prefill_ns(100) == 401_846  # the toy case above
