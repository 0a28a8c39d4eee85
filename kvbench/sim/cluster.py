"""Sim deployment profiles: TOML -> frozen, validated dataclasses (one-line ConfigError before any simulation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from kvbench.config import KeyPath, Range, Source, dotted, read, read_value, reject_unknown
from kvbench.sim.cost.config import COST_KEYS  # the cost model's keys of a pool table
from kvbench.sim.profilefile import (
    MAX_GPUS,
    MAX_TOKENS,
    ClusterFile,
    LongContextFile,
    PoolFile,
    RescheduleFile,
    SpecDecodeFile,
    Tokens,
)
from kvbench.units import ms_to_ns, parse_count

LAYOUTS = {("colocated",): "colocated", ("decode", "prefill"): "pd", ("decode", "pre_prefill", "prefill"): "cpd"}
TIER_KINDS = ("dram", "ssd", "pool")  # below the per-instance HBM prefix cache, fastest first
TIER_SCOPES = {"dram": "node", "ssd": "node", "pool": "cluster"}
# Router name -> its parameters and defaults (REFERENCE §3; SGLang defaults are the newer 0.3 / 64 / 1.5).
ROUTER_PARAMS: dict[str, dict[str, Any]] = {
    "round_robin": {},
    "random": {},
    "least_loaded": {},
    "cache_aware": {
        "cache_threshold": 0.3,
        "balance_abs_threshold": 64,
        "balance_rel_threshold": 1.5,
        "max_tree_blocks": 32_768,
    },  # SGLang max_tree_size 2^24 tokens = 32,768 blocks of 512
    "conductor": {
        "kvcache_balancing_threshold": 4,
        "ttft_slo_ms": 0.0,
        "tbt_slo_ms": 0.0,
        "predict_decode_load": False,
        "reject_at_decode": False,
    },
    "kv_router": {"prefill_load_scale": 1.0, "temperature": 0.0, "host_hit_weight": 0.75},
    "cpd": {"warm_threshold": 0.5},
}
ENGINE_KEYS = ("token_budget", "max_running", "block_tokens", "chunked_prefill", "share_inflight")


@dataclass(frozen=True)
class PoolCfg:
    name: str
    role: str
    instances: int
    tp: int = 1
    token_budget: int = 8192  # tokens computed per batch step (decode tokens count toward it)
    max_running: int = 256  # requests in the running batch at most
    block_tokens: int = 16  # paged-KV block size
    chunked_prefill: bool = True  # Sarathi: prefill chunks ride along decode steps
    share_inflight: bool = False  # HBM prefix blocks are shared while in use, not only once released
    cost: tuple[tuple[str, Any], ...] = ()  # the pool's cost-model table (model, gpu, tp, efficiencies, profile)
    gpus: int = 0  # GPUs of one instance: (ep if ep > 1 else tp) x pp; 0: tp
    preempt: str = "recompute"  # recompute: re-prefill later; swap: KV to the node's DRAM and back (vLLM swap)
    swap_gib: float = 4.0  # swap space per GPU in GiB (vLLM's swap_space default)
    dram_link: str = "pcie5"  # the HBM <-> node DRAM link swaps and DRAM landings travel over
    kv_landing: str = "hbm"  # dram: P->D KV lands in the decode node's DRAM, then goes to HBM over dram_link

    @property
    def instance_gpus(self) -> int:
        return self.gpus or self.tp


@dataclass(frozen=True)
class TierCfg:
    kind: str  # dram | ssd | pool
    capacity_tokens: int
    link: str | tuple[tuple[str, Any], ...]  # link into HBM: a catalog name or an inline LinkSpec table
    write_through: bool = False  # every block an instance releases is written here too (Mooncake Store, CPD)
    layerwise: bool = False  # loads from here overlap the prefill layer by layer (LMCache, Mooncake)
    replicas: int = 0  # pool: 0 = a read uses the reader's NIC only; n = placed copies, hot blocks up to n
    replicate_hot: int = 0  # pool: reads of a block after which it gains a copy (0: never)
    sharing: str = "fifo"  # its link shares the wire FIFO or fair (processor sharing)


@dataclass(frozen=True)
class TransferCfg:
    link: str = "roce-mooncake"  # P->D between nodes
    intra_link: str = "nvlink-h100"  # P->D within a node
    granularity: str = "layer"
    layerwise: bool = True  # stream layer by layer during prefill: only the exposed tail counts toward TTFT
    sharing: str = "fifo"  # link and intra_link share the wire FIFO or fair (processor sharing)


@dataclass(frozen=True)
class SpecDecodeCfg:
    k: int
    acceptance: tuple[float, ...]
    draft_model: str = ""  # "" = no separate draft model (MTP heads: draft cost folded into the verify step)
    draft_apart: bool = False  # draft on other devices: one draft->target message per step
    draft_link: str = "nvlink-h100"


@dataclass(frozen=True)
class RescheduleCfg:
    interval_ns: int
    predictor_error: float  # relative error of the remaining-length predictor (uniform in [-e, +e])
    imbalance: float  # migrate when max load > (1 + imbalance) x min load (load = predicted remaining KV-steps)
    max_migrations: int  # per rescheduling round
    link: str


@dataclass(frozen=True)
class LongContextCfg:
    threshold_tokens: int  # prompts at least this long are split across prefill instances
    instances: int
    mode: str = "pipeline"


@dataclass(frozen=True)
class ClusterCfg:
    source: str
    model: Any  # catalog name or inline table (validated by the cost model)
    pools: tuple[PoolCfg, ...]
    layout: str  # colocated | pd | cpd
    router: str = "round_robin"
    router_params: tuple[tuple[str, Any], ...] = ()
    transfer: TransferCfg = field(default_factory=TransferCfg)
    tiers: tuple[TierCfg, ...] = ()
    gpus_per_node: int = 8
    frontend_ns: int = 0  # client -> router -> engine latency added before routing
    prefix_caching: bool = True
    prefix_block_tokens: int = 512
    spec_decode: SpecDecodeCfg | None = None
    reschedule: RescheduleCfg | None = None
    long_context: LongContextCfg | None = None

    def params(self) -> dict[str, Any]:
        return dict(self.router_params)

    def pool(self, role: str) -> PoolCfg | None:
        return next((p for p in self.pools if p.role == role), None)


def _tokens(src: Source, path: KeyPath, value: Tokens) -> int:
    try:
        n = parse_count(value) if isinstance(value, str) else value
    except ValueError as e:
        raise src.error(path, f"{dotted(path)}: {e}") from None
    if not 0 < n <= MAX_TOKENS:
        raise src.bad(path, f"a token count > 0 and <= {MAX_TOKENS:,} like 3000000 or '3M'", value)
    return n


def _pools(src: Source, f: ClusterFile) -> tuple[PoolCfg, ...]:
    if not f.pools:
        raise src.error(("pools",), "pools: expected at least one [pools.NAME] table with role, instances, gpu")
    out = []
    for name, t in f.pools.items():
        if t.tp is not None and t.tp > f.gpus_per_node:
            raise src.bad(("pools", name, "tp"), f"a whole number >= 1 and <= {f.gpus_per_node}", t.tp)
        cost = {k: getattr(t, k) for k in COST_KEYS if getattr(t, k) is not None}
        cost.setdefault("model", f.model)
        cost["gpus_per_node"] = f.gpus_per_node
        engine = {k: getattr(f.engine if getattr(t, k) is None else t, k) for k in ENGINE_KEYS}
        gpus = _instance_gpus(src, name, t, f.gpus_per_node)
        if t.kv_landing == "dram" and t.role != "decode":
            raise src.error(("pools", name, "kv_landing"), f"pools.{name}.kv_landing: 'dram' is for a decode pool")
        host: dict[str, Any] = {"preempt": t.preempt, "dram_link": t.dram_link, "kv_landing": t.kv_landing}
        cost_items = tuple(sorted(cost.items()))
        out.append(
            PoolCfg(
                name, t.role, t.instances, t.tp or 1, cost=cost_items, gpus=gpus, swap_gib=t.swap_gib, **engine, **host
            )
        )
    gpus = sum(p.instances * p.instance_gpus for p in out)
    if gpus > MAX_GPUS:
        raise src.error(
            ("pools",), f"pools: {gpus:,} GPUs in all (instances x GPUs per instance); at most {MAX_GPUS:,}"
        )
    roles = tuple(sorted({p.role for p in out}))
    if roles not in LAYOUTS or len(out) != len(roles):
        raise src.error(
            ("pools",),
            "pools: pools must be one 'colocated' pool, or one 'prefill' + one 'decode' pool, or "
            f"'pre_prefill' + 'prefill' + 'decode' (CPD); got roles {', '.join(p.role for p in out)}",
        )
    return tuple(out)


def _instance_gpus(src: Source, name: str, t: PoolFile, per_node: int) -> int:
    """GPUs of one instance, (ep or tp) x pp; an instance larger than a node fills whole nodes."""
    ep, pp = t.ep or 1, t.pp or 1
    if isinstance(ep, bool) or not isinstance(ep, int) or isinstance(pp, bool) or not isinstance(pp, int):
        return t.tp or 1  # the cost model reports the bad value with its allowed range
    gpus = (ep if ep > 1 else t.tp or 1) * pp
    if gpus > per_node and gpus % per_node:
        raise src.error(
            ("pools", name, "ep" if ep > 1 else "pp"),
            f"pools.{name}: an instance of {gpus} GPUs ((ep or tp) x pp) spans nodes, so it must fill whole nodes "
            f"of gpus_per_node = {per_node}",
        )
    return gpus


def _router(src: Source, router: Any, layout: str) -> tuple[str, tuple]:
    t = {"name": router} if isinstance(router, str) else router
    if not isinstance(t, dict):
        raise src.bad(("router",), "a router name or a [router] table", router)
    name = t.get("name", "round_robin")
    if not isinstance(name, str) or name not in ROUTER_PARAMS:
        raise src.bad(("router", "name"), f"one of {', '.join(ROUTER_PARAMS)}", name)
    defaults = ROUTER_PARAMS[name]
    reject_unknown(t, ("name", *defaults), src, ("router",))
    if (name == "cpd") != (layout == "cpd"):
        raise src.error(
            ("router", "name"),
            f"router.name: router 'cpd' goes with pre_prefill/prefill/decode pools (layout {layout})",
        )
    params = {}
    for key, default in defaults.items():
        tp = bool if isinstance(default, bool) else Annotated[type(default), Range(0)]
        params[key] = read_value(tp, t.get(key, default), src, ("router", key))
    return name, tuple(sorted(params.items()))


def _tiers(src: Source, f: ClusterFile) -> tuple[TierCfg, ...]:
    out = []
    for kind in TIER_KINDS:  # fixed order: the demotion chain is HBM -> dram -> ssd -> pool
        t = getattr(f.tiers, kind)
        if t is not None:
            link = tuple(sorted(t.link.items())) if isinstance(t.link, dict) else t.link
            capacity = _tokens(src, ("tiers", kind, "capacity_tokens"), t.capacity_tokens)
            if kind != "pool" and (t.replicas or t.replicate_hot):
                raise src.error(("tiers", kind), f"tiers.{kind}: replicas and replicate_hot are keys of tiers.pool")
            tier = (t.write_through, t.layerwise, t.replicas, t.replicate_hot, t.sharing)
            out.append(TierCfg(kind, capacity, link, *tier))
    if any(tc.replicas for tc in out) and "fair" in (f.transfer.sharing, *(tc.sharing for tc in out)):
        raise src.error(
            ("tiers", "pool"), 'tiers.pool.replicas reads placed copies over FIFO links: drop sharing = "fair"'
        )
    return tuple(out)


def _spec_decode(src: Source, t: SpecDecodeFile | None) -> SpecDecodeCfg | None:
    if t is None:
        return None
    if len(t.acceptance) != t.k:
        raise src.bad(("spec_decode", "acceptance"), f"a list of k={t.k} probabilities in [0, 1]", list(t.acceptance))
    return SpecDecodeCfg(t.k, t.acceptance, t.draft_model, t.draft_apart, t.draft_link)


def _reschedule(src: Source, t: RescheduleFile | None, layout: str) -> RescheduleCfg | None:
    if t is None:
        return None
    if layout == "colocated":
        raise src.error(("reschedule",), "reschedule: decode rescheduling needs a decode pool (pd or cpd layout)")
    return RescheduleCfg(ms_to_ns(t.interval_ms), t.predictor_error, t.imbalance, t.max_migrations, t.link)


def _long_context(src: Source, t: LongContextFile | None, pools: tuple[PoolCfg, ...]) -> LongContextCfg | None:
    if t is None:
        return None
    first = next((p for p in pools if p.role == "prefill"), None)
    if first is None:
        raise src.error(("long_context",), "long_context: splitting long prefills needs a prefill pool (pd or cpd)")
    if t.instances > first.instances:
        raise src.bad(("long_context", "instances"), f"a whole number >= 2 and <= {first.instances}", t.instances)
    return LongContextCfg(_tokens(src, ("long_context", "threshold_tokens"), t.threshold_tokens), t.instances, t.mode)


def _source(source: str) -> Source:
    path = Path(source)
    return Source(source or "<sim profile>", path.read_text(encoding="utf-8") if source and path.is_file() else "")


def parse_cluster(params: dict[str, Any], source: str) -> ClusterCfg:
    """Validate a sim profile (TargetSpec.params, --set overrides applied) into a ClusterCfg."""
    src = _source(source)
    f = read(ClusterFile, params, src)
    pools = _pools(src, f)
    layout = LAYOUTS[tuple(sorted({p.role for p in pools}))]
    router, router_params = _router(src, f.router, layout)
    tr = f.transfer
    return ClusterCfg(
        source=src.name,
        model=f.model,
        pools=pools,
        layout=layout,
        router=router,
        router_params=router_params,
        transfer=TransferCfg(tr.link, tr.intra_link, tr.granularity, tr.layerwise, tr.sharing),
        tiers=_tiers(src, f),
        gpus_per_node=f.gpus_per_node,
        frontend_ns=ms_to_ns(f.frontend_ms),
        prefix_caching=f.prefix_caching,
        prefix_block_tokens=f.prefix_block_tokens,
        spec_decode=_spec_decode(src, f.spec_decode),
        reschedule=_reschedule(src, f.reschedule, layout),
        long_context=_long_context(src, f.long_context, pools),
    )


def location(source: str, key: str) -> str:
    """'file:line [key]' for errors found after parsing (catalog names, capacities)."""
    return f"{_source(source).at(tuple(key.split('.')))} [{key}]"
