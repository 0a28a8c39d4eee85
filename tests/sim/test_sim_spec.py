"""Spec catalogs and their validation: every shipped entry loads; bad tables give one-line errors naming the key."""

from __future__ import annotations

import pytest

from kvbench.config import ConfigError
from kvbench.sim import spec

MODEL = {"n_layers": 2, "hidden": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "params": 10, "active_params": 10}
GPU = {"flops_per_s": 1e12, "hbm_bytes": 10**9, "hbm_bytes_per_s": 1e11}
LINK = {"alpha_ns": 1000, "bytes_per_s": 1e9}


def test_catalogs_hold_the_required_entries() -> None:
    assert set(spec.catalog("models")) >= {
        "Llama-3.1-8B",
        "Llama-3-70B",
        "Qwen3-8B",
        "Qwen3-32B",
        "OPT-13B",
        "OPT-66B",
        "DeepSeek-V3",
    }
    assert set(spec.catalog("gpus")) >= {"A100-80GB", "A800", "H100", "H800", "H200", "B200"}
    assert set(spec.catalog("links")) >= {
        "nvlink-h100",
        "nvlink-a100",
        "ib-h100",
        "rdma-mooncake",
        "roce-mooncake",
        "pcie5",
        "tcp",
    }


def test_reference_hardware_figures() -> None:
    # REFERENCE §5 datasheet figures
    h100, b200 = spec.gpu("H100"), spec.gpu("B200")
    assert (h100.flops_per_s, h100.hbm_bytes, h100.hbm_bytes_per_s) == (989e12, 80e9, 3.35e12)
    assert (b200.flops_per_s, b200.hbm_bytes_per_s) == (2.25e15, 8e12)
    ds = spec.model("DeepSeek-V3")
    assert ds.is_mla and (ds.params, ds.active_params) == (671e9, 37e9)


def test_lookup_is_case_insensitive_and_unknown_names_list_the_known() -> None:
    assert spec.model("llama-3.1-8b") is spec.model("Llama-3.1-8B")
    with pytest.raises(ConfigError, match=r"^p.toml:3: unknown gpu 'H300'; known: A100-80GB, A800, H100, H800"):
        spec.gpu("H300", "p.toml:3")
    with pytest.raises(ConfigError, match=r"unknown link 'ib'; known: nvlink-h100"):
        spec.link("ib")


@pytest.mark.parametrize(
    "build, table, match",
    [
        (spec.model_from, {**MODEL, "layers": 3}, r"^w: unknown key 'layers'; allowed: n_layers, hidden"),
        (spec.model_from, {k: v for k, v in MODEL.items() if k != "head_dim"}, r"^w: missing key 'head_dim'"),
        (spec.model_from, {**MODEL, "n_layers": 0}, r"^w: key 'n_layers' = 0 is zero; expected a number >= 1"),
        (spec.model_from, {**MODEL, "n_layers": 2.5}, r"^w: key 'n_layers' = 2.5: expected a whole number"),
        (spec.model_from, {**MODEL, "active_params": 11}, r"^w: key 'active_params' = 11 exceeds params = 10"),
        (spec.model_from, {**MODEL, "n_kv_heads": 3, "n_heads": 4}, r"key 'n_kv_heads' = 3 must divide n_heads = 4"),
        (spec.model_from, {**MODEL, "mla_latent": 512}, r"'mla_latent' and 'mla_rope' must both be 0"),
        (spec.model_from, {**MODEL, "n_experts": 8}, r"'n_experts', 'experts_per_token', 'expert_params' must all"),
        (
            spec.model_from,
            {**MODEL, "n_experts": 2, "experts_per_token": 4, "expert_params": 5},
            r"with experts_per_token <= n_experts",
        ),
        (spec.gpu_from, {**GPU, "hbm_bytes_per_s": 0}, r"^w: key 'hbm_bytes_per_s' = 0 is zero"),
        (spec.gpu_from, {**GPU, "gemm_serial": 1.5}, r"^w: key 'gemm_serial' = 1.5 must be in \[0, 1\]"),
        (spec.gpu_from, {**GPU, "moe_mfu": -0.1}, r"^w: key 'moe_mfu' = -0.1 is negative"),
        (spec.gpu_from, {**GPU, "mfu": 1.2}, r"^w: key 'mfu' = 1.2 must be in \(0, 1\]"),
        (spec.gpu_from, {**GPU, "step_overhead_ns": -5}, r"^w: key 'step_overhead_ns' = -5 is negative"),
        (spec.gpu_from, {**GPU, "flops_per_s": "fast"}, r"^w: key 'flops_per_s': expected a number >= 1, got 'fast'"),
        (spec.link_from, {**LINK, "bytes_per_s": 0}, r"^w: key 'bytes_per_s' = 0 is zero"),
        (
            spec.link_from,
            {**LINK, "bytes_per_s": float("nan")},
            r"^w: key 'bytes_per_s': expected a number >= 1, got nan",
        ),
        (spec.link_from, {**LINK, "outstanding": 0}, r"^w: key 'outstanding' = 0 is zero"),
        (spec.link_from, {**LINK, "beta": 1}, r"^w: unknown key 'beta'; allowed: alpha_ns, bytes_per_s"),
    ],
)
def test_bad_spec_tables(build, table: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        build(table, "w")
    assert "\n" not in str(e.value)
