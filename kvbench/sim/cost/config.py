"""A pool table's cost keys -> its StepCost: the roofline, or a measured profile over the roofline's memory model.

`profile = "FILE.csv"` loads a measured profile; `cost = "aic:BACKEND"` (trtllm, vllm, sglang; `aic` alone is
vLLM) builds the pool's profile from AIConfigurator on first use (cached, kvbench/sim/cost/aic.py);
`cost = "roofline"` is the default."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvbench.config import ConfigError
from kvbench.sim.cost import StepCost
from kvbench.sim.cost.aic import BACKENDS, cached_profile
from kvbench.sim.cost.profile import ProfileCost
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.spec import ModelSpec, gpu_from, link_from, model_from
from kvbench.sim.spec import gpu as spec_gpu
from kvbench.sim.spec import link as spec_link
from kvbench.sim.spec import model as spec_model

# Keys of a pool table that configure its cost model (the cluster profile passes its top-level gpus_per_node too).
COST_KEYS = (
    "model",
    "gpu",
    "tp",
    "mfu",
    "mbu",
    "step_overhead_ns",
    "layer_overhead_ns",
    "mem_fraction",
    "dp_attention",
    "allreduce_link",
    "ep",
    "pp",
    "microbatches",
    "fp8",
    "ep_link",
    "ep_intra_link",
    "pp_link",
    "profile",
    "cost",
)
_GPU_OVERRIDES = ("mfu", "mbu", "step_overhead_ns", "layer_overhead_ns")


def _named_or_table(cfg: dict, key: str, where: str, lookup: Callable, build: Callable) -> Any:
    """A catalog name (`gpu = "H100"`) or an inline table with the spec's fields (`gpu = {flops_per_s = ...}`)."""
    value = cfg[key]
    if isinstance(value, dict):
        return build(value, f"{where} key {key!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: key {key!r}: expected a catalog name or a table, got {value!r}")
    return lookup(value, f"{where} key {key!r}")


def _check_tp(m: ModelSpec, tp: Any, per_node: Any, where: str) -> None:
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise ConfigError(f"{where}: key 'gpus_per_node' = {per_node!r}: expected a whole number >= 1")
    allowed = [d for d in range(1, per_node + 1) if m.n_heads % d == 0]
    if isinstance(tp, bool) or not isinstance(tp, int) or tp not in allowed:
        why = (
            f"exceeds gpus_per_node = {per_node}"
            if isinstance(tp, int) and tp > per_node
            else f"must divide n_heads = {m.n_heads} of {m.name}"
        )
        raise ConfigError(f"{where}: key 'tp' = {tp!r} {why}; allowed: {', '.join(map(str, allowed))}")


def cost_model(cfg: dict[str, Any], where: str) -> StepCost:
    """CostModel (or ProfileCost when `profile` names a CSV) from a pool table: COST_KEYS plus `gpus_per_node`.
    Errors name `where`."""
    for key in ("model", "gpu"):
        if key not in cfg:
            raise ConfigError(f'{where}: missing key {key!r} (e.g. model = "Llama-3.1-8B", gpu = "H100")')
    m = _named_or_table(cfg, "model", where, spec_model, model_from)
    g = _named_or_table(cfg, "gpu", where, spec_gpu, gpu_from)
    if any(k in cfg for k in _GPU_OVERRIDES):
        base = {f: getattr(g, f) for f in ("flops_per_s", "hbm_bytes", "hbm_bytes_per_s", "fp8_flops_per_s")}
        base |= {f: getattr(g, f) for f in _GPU_OVERRIDES}
        g = gpu_from({**base, **{k: cfg[k] for k in _GPU_OVERRIDES if k in cfg}}, where, g.name)
    tp = cfg.get("tp", 1)
    _check_tp(m, tp, cfg.get("gpus_per_node", 8), where)
    frac = cfg.get("mem_fraction", 0.9)
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
        raise ConfigError(f"{where}: key 'mem_fraction' = {frac!r}: expected a number in (0, 1]")
    layout = _parallel_keys(cfg, m, where)
    try:
        cm = CostModel(m, g, tp, mem_fraction=float(frac), gpus_per_node=cfg.get("gpus_per_node", 8), **layout)
        cm.kv_capacity_tokens()
    except ConfigError as e:
        raise ConfigError(f"{where}: keys 'model'/'gpu'/'tp'/'ep'/'pp'/'fp8': {e}") from None
    if "profile" in cfg:
        if "cost" in cfg:
            raise ConfigError(f"{where}: keys 'profile' and 'cost' exclude each other (a profile CSV is its cost)")
        return ProfileCost.load(cfg["profile"], cm, f"{where} key 'profile'")
    backend = _aic_backend(cfg.get("cost", "roofline"), where)
    if backend:
        return ProfileCost.load(cached_profile(m, g, tp, backend), cm, f"{where} key 'cost'")
    return cm


_PARALLEL_INTS = (("ep", 1, 65_536), ("pp", 1, 1024), ("microbatches", 0, 1024))
_LINK_KEYS = ("allreduce_link", "ep_link", "ep_intra_link", "pp_link")


def _parallel_keys(cfg: dict, m: ModelSpec, where: str) -> dict[str, Any]:
    """The pool's parallel-layout keys (kvbench/sim/cost/parallel.py), checked; absent keys keep their defaults."""
    out: dict[str, Any] = {k: _flag(cfg, k, where) for k in ("dp_attention", "fp8")}
    out |= {k: _whole(cfg, k, lo, hi, where) for k, lo, hi in _PARALLEL_INTS if k in cfg}
    if out.get("pp", 1) > m.n_layers:
        raise ConfigError(f"{where}: key 'pp' = {out['pp']} exceeds the {m.n_layers} layers of {m.name}")
    out |= {k: _named_or_table(cfg, k, where, spec_link, link_from) for k in _LINK_KEYS if k in cfg}
    return out


def _flag(cfg: dict, key: str, where: str) -> bool:
    value = cfg.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: key {key!r} = {value!r}: expected true or false")
    return value


def _whole(cfg: dict, key: str, lo: int, hi: int, where: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{where}: key {key!r} = {value!r}: expected a whole number >= {lo} and <= {hi}")
    return value


def _aic_backend(cost: Any, where: str) -> str:
    """'' for the roofline, else the AIConfigurator backend named by `cost`."""
    if cost == "roofline":
        return ""
    kind, _, backend = cost.partition(":") if isinstance(cost, str) else ("", "", "")
    if kind == "aic" and (backend or "vllm") in BACKENDS:
        return backend or "vllm"
    choices = ", ".join(["roofline", "aic"] + [f"aic:{b}" for b in BACKENDS])
    raise ConfigError(f"{where}: key 'cost' = {cost!r}: expected one of {choices}")
