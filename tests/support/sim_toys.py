"""Toy models and a toy GPU with round numbers, so the sim cost tests can compute every step by hand."""

from __future__ import annotations

from kvbench.sim import spec

# model: 2 layers, 2 heads of dim 4, 1 KV head, hidden 8, 1e6 params (2 B each = 2e6 weight bytes)
#   KV/token = 2 * 2 layers * 1 * 4 * 2 B = 32 B; attention FLOPs per (query, key) pair = 2*2 layers*2 heads*(2*4) = 64
SHAPE = {"n_layers": 2, "hidden": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4}
TOY_TABLE = {**SHAPE, "params": 1_000_000, "active_params": 1_000_000}
TOY = spec.model_from(TOY_TABLE, "toy")
# MoE: 2e5 non-expert params + 8 experts of 1e5 (8e5), 2 per token: active = 2e5 + 8e5 * 2/8 = 4e5
MOE = spec.model_from(
    {
        **SHAPE,
        "params": 1_000_000,
        "active_params": 400_000,
        "n_experts": 8,
        "experts_per_token": 2,
        "expert_params": 800_000,
    },
    "toy-moe",
)
# gpu: 1e12 FLOP/s at mfu 0.5 -> 5e11; 1e11 B/s at mbu 0.5 -> 5e10; overheads 1000 ns/step + 100 ns/layer (x2 = 200)
TOY_GPU_TABLE = {
    "flops_per_s": 1e12,
    "hbm_bytes": 10_000_000,
    "hbm_bytes_per_s": 1e11,
    "mfu": 0.5,
    "mbu": 0.5,
    "step_overhead_ns": 1000,
    "layer_overhead_ns": 100,
}
TOY_GPU = spec.gpu_from(TOY_GPU_TABLE, "toy-gpu")
