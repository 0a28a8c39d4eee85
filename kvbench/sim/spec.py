"""Model, GPU and link specs: frozen dataclasses loaded from the TOML catalogs in kvbench/sim/catalog/."""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvbench.config import ConfigError

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape. MLA models set mla_latent/mla_rope and n_kv_heads = 1 (one latent shared by all heads)."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    params: int  # total parameters (MoE: all experts)
    active_params: int  # parameters touched per token (dense: == params)
    bytes_per_param: int = 2  # 2 = bf16 weights, 1 = fp8
    bytes_per_kv: int = 2  # bytes per KV element
    mla_latent: int = 0  # MLA compressed-KV width per layer (0 = not MLA)
    mla_rope: int = 0  # MLA decoupled RoPE key width per layer
    n_experts: int = 0  # routed experts per MoE layer (0: dense, or MoE read as min(params, active x tokens))
    experts_per_token: int = 0  # routed experts each token selects (top-k)
    expert_params: int = 0  # parameters of all routed experts of all layers (part of params)

    @property
    def is_mla(self) -> bool:
        return self.mla_latent > 0

    @property
    def is_moe(self) -> bool:
        return self.active_params < self.params

    def expert_active_params(self) -> int:
        """Routed-expert parameters one token touches (0 without expert fields)."""
        return self.expert_params * self.experts_per_token // self.n_experts if self.n_experts else 0

    def kv_bytes_per_token(self) -> int:
        # GQA/MHA: K and V, each kv_heads x head_dim per layer; MLA: one latent + rope key per layer.
        if self.is_mla:
            return self.n_layers * (self.mla_latent + self.mla_rope) * self.bytes_per_kv
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_kv

    def weight_bytes(self) -> int:
        return self.params * self.bytes_per_param

    def attn_flops_per_pair(self) -> int:
        """FLOPs of one (query token, key token) pair over all layers: QK^T plus PV, 2 FLOPs per multiply-add.

        GQA/MHA: 2*H*d (scores) + 2*H*d (values) = 4*H*d per layer. MLA (prefill form): the query-key width per
        head is head_dim + rope, the value width head_dim, so 2*H*(2*d + rope) per layer."""
        return 2 * self.n_layers * self.n_heads * (2 * self.head_dim + self.mla_rope)


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. mfu/mbu are the fractions of peak FLOP/s and HBM bandwidth a real engine reaches."""

    name: str
    flops_per_s: float  # dense bf16 peak
    hbm_bytes: int
    hbm_bytes_per_s: float
    mfu: float = 0.5  # compute efficiency of the weight GEMMs (model FLOPs utilisation)
    mbu: float = 0.75  # memory-bandwidth efficiency (weights and KV)
    step_overhead_ns: int = 0  # fixed cost per engine step (scheduler, sampling, launch)
    layer_overhead_ns: int = 0  # fixed cost per layer per step (kernel launches, norms)
    attn_mfu: float = 0.0  # compute efficiency of attention (FlashAttention); 0: the same as mfu
    moe_mfu: float = 0.0  # compute efficiency of routed-expert GEMMs incl. token dispatch; 0: the same as mfu
    gemm_serial: float = 0.0  # share of the shorter of GEMM compute / weight read not hidden under the longer
    mla_layer_ns: int = 0  # fixed cost per MLA attention layer per step (its many small kernels)
    moe_layer_ns: int = 0  # fixed cost per MoE layer per step (routing, dispatch, grouped-GEMM launches)
    fp8_flops_per_s: float = 0.0  # dense FP8 tensor-core peak (0: no FP8 support)
    source: str = ""  # where the figures come from


@dataclass(frozen=True)
class LinkSpec:
    """One transfer path: t = per_request + ceil(messages/outstanding)*alpha + bytes/(bytes_per_s*efficiency)."""

    name: str
    alpha_ns: int  # latency per message (RTT-ish)
    bytes_per_s: float  # line rate (beta)
    efficiency: float = 1.0  # fraction of line rate reached by large transfers
    per_request_ns: int = 0  # fixed cost per transfer (connection, handshake, metadata)
    outstanding: int = 1  # messages in flight at once (queue depth)
    note: str = ""  # where the numbers come from

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bytes_per_s * self.efficiency


# Per field: (type, smallest allowed value)
_INT, _FLOAT, _STR = "int", "float", "str"
_MODEL_RULES = {
    "n_layers": (_INT, 1),
    "hidden": (_INT, 1),
    "n_heads": (_INT, 1),
    "n_kv_heads": (_INT, 1),
    "head_dim": (_INT, 1),
    "params": (_INT, 1),
    "active_params": (_INT, 1),
    "bytes_per_param": (_INT, 1),
    "bytes_per_kv": (_INT, 1),
    "mla_latent": (_INT, 0),
    "mla_rope": (_INT, 0),
    "n_experts": (_INT, 0),
    "experts_per_token": (_INT, 0),
    "expert_params": (_INT, 0),
}
_GPU_RULES = {
    "flops_per_s": (_FLOAT, 1),
    "hbm_bytes": (_INT, 1),
    "hbm_bytes_per_s": (_FLOAT, 1),
    "mfu": (_FLOAT, 1e-6),
    "mbu": (_FLOAT, 1e-6),
    "step_overhead_ns": (_INT, 0),
    "layer_overhead_ns": (_INT, 0),
    "attn_mfu": (_FLOAT, 0),
    "moe_mfu": (_FLOAT, 0),
    "gemm_serial": (_FLOAT, 0),
    "mla_layer_ns": (_INT, 0),
    "moe_layer_ns": (_INT, 0),
    "fp8_flops_per_s": (_FLOAT, 0),
    "source": (_STR, 0),
}
_LINK_RULES = {
    "alpha_ns": (_INT, 0),
    "bytes_per_s": (_FLOAT, 1),
    "efficiency": (_FLOAT, 1e-6),
    "per_request_ns": (_INT, 0),
    "outstanding": (_INT, 1),
    "note": (_STR, 0),
}


def _coerce(value: Any, kind: str, minimum: float, where: str, key: str) -> Any:
    if kind == _STR:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key {key!r}: expected a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: key {key!r}: expected a number >= {minimum:g}, got {value!r}")
    if value < minimum:
        what = "zero" if value == 0 else "negative" if value < 0 else "too small"
        raise ConfigError(f"{where}: key {key!r} = {value!r} is {what}; expected a number >= {minimum:g}")
    if kind == _INT:
        if value != int(value):
            raise ConfigError(f"{where}: key {key!r} = {value!r}: expected a whole number")
        return int(value)
    return float(value)


def _build(cls: type, rules: Mapping[str, tuple[str, float]], d: Mapping[str, Any], where: str, name: str) -> Any:
    """Validate a TOML table against a spec class: unknown keys, missing keys, types and ranges."""
    names = [f.name for f in fields(cls) if f.name != "name"]
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is MISSING]
    for key in d:
        if key not in rules and key != "name":
            raise ConfigError(f"{where}: unknown key {key!r}; allowed: {', '.join(names)}")
    for key in required:
        if key not in d:
            raise ConfigError(f"{where}: missing key {key!r} (required: {', '.join(required)})")
    kwargs = {k: _coerce(v, *rules[k], where, k) for k, v in d.items() if k != "name"}
    return cls(name=str(d.get("name", name)), **kwargs)


def model_from(d: Mapping[str, Any], where: str, name: str = "custom") -> ModelSpec:
    m: ModelSpec = _build(ModelSpec, _MODEL_RULES, d, where, name)
    if m.active_params > m.params:
        raise ConfigError(f"{where}: key 'active_params' = {m.active_params} exceeds params = {m.params}")
    if m.n_heads % m.n_kv_heads:
        raise ConfigError(f"{where}: key 'n_kv_heads' = {m.n_kv_heads} must divide n_heads = {m.n_heads}")
    if (m.mla_latent == 0) != (m.mla_rope == 0):
        raise ConfigError(f"{where}: keys 'mla_latent' and 'mla_rope' must both be 0 (GQA) or both > 0 (MLA)")
    experts = (m.n_experts, m.experts_per_token, m.expert_params)
    if any(experts) and not (all(experts) and m.experts_per_token <= m.n_experts and m.expert_params < m.params):
        raise ConfigError(
            f"{where}: keys 'n_experts', 'experts_per_token', 'expert_params' must all be 0 or all > 0, "
            "with experts_per_token <= n_experts and expert_params < params"
        )
    return m


def gpu_from(d: Mapping[str, Any], where: str, name: str = "custom") -> GpuSpec:
    g: GpuSpec = _build(GpuSpec, _GPU_RULES, d, where, name)
    for key, bounds in (
        ("mfu", "(0, 1]"),
        ("mbu", "(0, 1]"),
        ("attn_mfu", "[0, 1]"),
        ("moe_mfu", "[0, 1]"),
        ("gemm_serial", "[0, 1]"),
    ):
        if getattr(g, key) > 1:
            raise ConfigError(f"{where}: key {key!r} = {getattr(g, key)} must be in {bounds}")
    return g


def link_from(d: Mapping[str, Any], where: str, name: str = "custom") -> LinkSpec:
    link: LinkSpec = _build(LinkSpec, _LINK_RULES, d, where, name)
    if link.efficiency > 1:
        raise ConfigError(f"{where}: key 'efficiency' = {link.efficiency} must be in (0, 1]")
    return link


_BUILDERS = {"models": model_from, "gpus": gpu_from, "links": link_from}


@functools.cache
def catalog(kind: str) -> Mapping[str, Any]:
    """All specs of one catalog file (models, gpus, links), by name; read once, immutable."""
    path = CATALOG_DIR / f"{kind}.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    build = _BUILDERS[kind]
    return MappingProxyType({name: build(table, f"{path} [{name}]", name) for name, table in data.items()})


def _lookup(kind: str, what: str, name: str, where: str) -> Any:
    specs = catalog(kind)
    if name in specs:
        return specs[name]
    folded = {k.lower(): v for k, v in specs.items()}
    if isinstance(name, str) and name.lower() in folded:
        return folded[name.lower()]
    prefix = f"{where}: " if where else ""
    raise ConfigError(f"{prefix}unknown {what} {name!r}; known: {', '.join(specs)}")


def model(name: str, where: str = "") -> ModelSpec:
    return _lookup("models", "model", name, where)


def gpu(name: str, where: str = "") -> GpuSpec:
    return _lookup("gpus", "gpu", name, where)


def link(name: str, where: str = "") -> LinkSpec:
    return _lookup("links", "link", name, where)
