"""Sim deployment profiles: TOML -> frozen, validated dataclasses (one-line ConfigError before any simulation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError, check_keys, where
from kvbench.sim.cost.config import COST_KEYS
from kvbench.sim.transfer import GRANULARITIES
from kvbench.units import ms_to_ns, parse_bytes, parse_count

ROLES = ("colocated", "pre_prefill", "prefill", "decode")
LAYOUTS = {("colocated",): "colocated", ("decode", "prefill"): "pd", ("decode", "pre_prefill", "prefill"): "cpd"}
TIER_KINDS = ("dram", "ssd", "pool")  # below the per-instance HBM prefix cache, fastest first
TIER_SCOPES = {"dram": "node", "ssd": "node", "pool": "cluster"}
LONG_CONTEXT_MODES = ("pipeline", "context_parallel")
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
    },
    "kv_router": {"prefill_load_scale": 1.0, "temperature": 0.0, "host_hit_weight": 0.75},
    "cpd": {"warm_threshold": 0.5},
}
TOP_KEYS = (
    "kind",
    "description",
    "model",
    "gpus_per_node",
    "frontend_ms",
    "prefix_caching",
    "prefix_block_tokens",
    "engine",
    "pools",
    "router",
    "transfer",
    "tiers",
    "spec_decode",
    "reschedule",
    "long_context",
)
ENGINE_KEYS = ("token_budget", "max_running", "block_tokens", "chunked_prefill")
POOL_KEYS = ("role", "instances") + COST_KEYS + ENGINE_KEYS


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
    cost: tuple[tuple[str, Any], ...] = ()  # the pool's cost-model table (model, gpu, tp, efficiencies, profile)


@dataclass(frozen=True)
class TierCfg:
    kind: str  # dram | ssd | pool
    capacity_tokens: int
    link: str | tuple[tuple[str, Any], ...]  # link into HBM: a catalog name or an inline LinkSpec table
    write_through: bool = False  # every block an instance releases is written here too (Mooncake Store, CPD)


@dataclass(frozen=True)
class TransferCfg:
    link: str = "roce-mooncake"  # P->D between nodes
    intra_link: str = "nvlink-h100"  # P->D within a node
    granularity: str = "layer"
    layerwise: bool = True  # stream layer by layer during prefill: only the exposed tail counts toward TTFT


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


class _Reader:
    """Typed getters that raise one-line errors naming file:line, the dotted key and what is allowed."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text

    def fail(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{where(self.path, self.text, key)}: key {key!r}: {msg}")

    def table(self, data: dict, key: str, allowed, section: str) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(section, f"expected a table, got {value!r}")
        check_keys(value, allowed, self.path, self.text, section)
        return value

    def num(
        self,
        data: dict,
        key: str,
        default,
        section: str,
        lo: float = 0,
        hi: float = float("inf"),
        integer: bool = False,
        open_lo: bool = False,
    ):
        value = data.get(key, default)
        full = f"{section}.{key}" if section else key
        ok_type = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_type):
            raise self.fail(full, f"expected {'an integer' if integer else 'a number'}, got {value!r}")
        if value < lo or (open_lo and value == lo) or value > hi:
            rng = f"{'>' if open_lo else '>='} {lo}" + ("" if hi == float("inf") else f" and <= {hi}")
            raise self.fail(full, f"must be {rng}, got {value!r}")
        return value

    def choice(self, data: dict, key: str, default, allowed, section: str) -> str:
        value = data.get(key, default)
        if value not in allowed:
            full = f"{section}.{key}" if section else key
            raise self.fail(full, f"must be one of {', '.join(map(str, allowed))}, got {value!r}")
        return value

    def boolean(self, data: dict, key: str, default: bool, section: str) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{section}.{key}" if section else key, f"expected true or false, got {value!r}")
        return value

    def string(self, data: dict, key: str, default: str | None, section: str) -> str:
        value = data.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{section}.{key}" if section else key, f"expected a non-empty string, got {value!r}")
        return value

    def tokens(self, data: dict, key: str, section: str) -> int:
        """A token count: an integer or a string like '3M'."""
        value = data.get(key)
        full = f"{section}.{key}"
        try:
            n = parse_count(value) if isinstance(value, str) else value
        except ValueError as e:
            raise self.fail(full, str(e)) from None
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise self.fail(full, f"expected a token count > 0 like 3000000 or '3M', got {value!r}")
        return n

    def size(self, data: dict, key: str, section: str) -> int:
        value = data.get(key)
        try:
            n = parse_bytes(value) if isinstance(value, str) else value
        except ValueError as e:
            raise self.fail(f"{section}.{key}", str(e)) from None
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise self.fail(f"{section}.{key}", f"expected a size > 0 like '256GB', got {value!r}")
        return n


def _engine(r: _Reader, base: dict, section: str, defaults: dict) -> dict:
    return {
        "token_budget": r.num(base, "token_budget", defaults.get("token_budget", 8192), section, 1, integer=True),
        "max_running": r.num(base, "max_running", defaults.get("max_running", 256), section, 1, integer=True),
        "block_tokens": r.num(
            base, "block_tokens", defaults.get("block_tokens", 16), section, 1, 1 << 20, integer=True
        ),
        "chunked_prefill": r.boolean(base, "chunked_prefill", defaults.get("chunked_prefill", True), section),
    }


def _pools(r: _Reader, data: dict, engine: dict, gpus_per_node: int, model) -> tuple[PoolCfg, ...]:
    pools = data.get("pools")
    if not isinstance(pools, dict) or not pools:
        raise r.fail("pools", "expected at least one [pools.NAME] table with role, instances, gpu")
    out = []
    for name, t in pools.items():
        sec = f"pools.{name}"
        t = r.table(pools, name, POOL_KEYS, sec)
        tp = r.num(t, "tp", 1, sec, 1, gpus_per_node, integer=True)
        if "gpu" not in t:
            raise r.fail(sec, "missing key 'gpu' (a catalog name like \"H100\" or an inline table)")
        cost = {k: t[k] for k in COST_KEYS if k in t}
        cost.setdefault("model", model)
        cost["gpus_per_node"] = gpus_per_node
        out.append(
            PoolCfg(
                name,
                r.choice(t, "role", None, ROLES, sec),
                r.num(t, "instances", 1, sec, 1, integer=True),
                tp,
                cost=tuple(sorted(cost.items())),
                **_engine(r, t, sec, engine),
            )
        )
    roles = tuple(sorted({p.role for p in out}))
    if roles not in LAYOUTS or len(out) != len(roles):
        raise r.fail(
            "pools",
            "pools must be one 'colocated' pool, or one 'prefill' + one 'decode' pool, or "
            f"'pre_prefill' + 'prefill' + 'decode' (CPD); got roles {', '.join(p.role for p in out)}",
        )
    return tuple(out)


def _router(r: _Reader, data: dict, layout: str) -> tuple[str, tuple]:
    t = data.get("router", {"name": "round_robin"})
    if isinstance(t, str):
        t = {"name": t}
    if not isinstance(t, dict):
        raise r.fail("router", f"expected a router name or a [router] table, got {t!r}")
    name = r.choice(t, "name", "round_robin", tuple(ROUTER_PARAMS), "router")
    defaults = ROUTER_PARAMS[name]
    check_keys(t, ("name", *defaults), r.path, r.text, "router")
    if (name == "cpd") != (layout == "cpd"):
        raise r.fail("router.name", f"router 'cpd' goes with pre_prefill/prefill/decode pools (layout {layout})")
    params = {}
    for key, default in defaults.items():
        if isinstance(default, bool):
            params[key] = r.boolean(t, key, default, "router")
        else:
            params[key] = r.num(t, key, default, "router", 0, integer=isinstance(default, int))
    return name, tuple(sorted(params.items()))


def _tiers(r: _Reader, data: dict) -> tuple[TierCfg, ...]:
    tiers = r.table(data, "tiers", TIER_KINDS, "tiers")
    out = []
    for kind in TIER_KINDS:  # fixed order: the demotion chain is HBM -> dram -> ssd -> pool
        if kind not in tiers:
            continue
        sec = f"tiers.{kind}"
        t = r.table(tiers, kind, ("capacity_tokens", "link", "write_through"), sec)
        link = t.get("link")
        link = tuple(sorted(link.items())) if isinstance(link, dict) else r.string(t, "link", None, sec)
        out.append(TierCfg(kind, r.tokens(t, "capacity_tokens", sec), link, r.boolean(t, "write_through", False, sec)))
    return tuple(out)


def _spec_decode(r: _Reader, data: dict) -> SpecDecodeCfg | None:
    if "spec_decode" not in data:
        return None
    sec = "spec_decode"
    t = r.table(data, sec, ("k", "acceptance", "draft_model", "draft_apart", "draft_link"), sec)
    k = r.num(t, "k", 3, sec, 1, 16, integer=True)
    acc = t.get("acceptance")
    if (
        not isinstance(acc, list)
        or len(acc) != k
        or not all(isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a <= 1 for a in acc)
    ):
        raise r.fail(f"{sec}.acceptance", f"expected a list of k={k} probabilities in [0, 1], got {acc!r}")
    draft = t.get("draft_model", "")
    if not isinstance(draft, str):
        raise r.fail(f"{sec}.draft_model", f"expected a model name or '', got {draft!r}")
    return SpecDecodeCfg(
        k,
        tuple(float(a) for a in acc),
        draft,
        r.boolean(t, "draft_apart", False, sec),
        r.string(t, "draft_link", "nvlink-h100", sec),
    )


def _reschedule(r: _Reader, data: dict, layout: str) -> RescheduleCfg | None:
    if "reschedule" not in data:
        return None
    sec = "reschedule"
    t = r.table(data, sec, ("interval_ms", "predictor_error", "imbalance", "max_migrations", "link"), sec)
    if layout == "colocated":
        raise r.fail(sec, "decode rescheduling needs a decode pool (pd or cpd layout)")
    return RescheduleCfg(
        ms_to_ns(r.num(t, "interval_ms", 500.0, sec, 0, open_lo=True)),
        float(r.num(t, "predictor_error", 0.2, sec, 0, 10)),
        float(r.num(t, "imbalance", 0.25, sec, 0)),
        r.num(t, "max_migrations", 4, sec, 1, integer=True),
        r.string(t, "link", "roce-mooncake", sec),
    )


def _long_context(r: _Reader, data: dict, pools: tuple[PoolCfg, ...]) -> LongContextCfg | None:
    if "long_context" not in data:
        return None
    sec = "long_context"
    t = r.table(data, sec, ("threshold_tokens", "instances", "mode"), sec)
    first = next((p for p in pools if p.role == "prefill"), None)
    if first is None:
        raise r.fail(sec, "splitting long prefills needs a prefill pool (pd or cpd layout)")
    n = r.num(t, "instances", 2, sec, 2, first.instances, integer=True)
    return LongContextCfg(
        r.tokens(t, "threshold_tokens", sec) if "threshold_tokens" in t else 131_072,
        n,
        r.choice(t, "mode", "pipeline", LONG_CONTEXT_MODES, sec),
    )


def parse_cluster(params: dict[str, Any], source: str) -> ClusterCfg:
    """Validate a sim profile (TargetSpec.params, --set overrides applied) into a ClusterCfg."""
    path = Path(source)
    text = path.read_text(encoding="utf-8") if source and path.is_file() else ""
    r = _Reader(source or "<sim profile>", text)
    check_keys(params, TOP_KEYS, r.path, text)
    gpn = r.num(params, "gpus_per_node", 8, "", 1, 1024, integer=True)
    engine = r.table(params, "engine", ENGINE_KEYS, "engine")
    engine = _engine(r, engine, "engine", {})
    model = params.get("model", "Llama-3.1-8B")
    pools = _pools(r, params, engine, gpn, model)
    layout = LAYOUTS[tuple(sorted({p.role for p in pools}))]
    router, router_params = _router(r, params, layout)
    tr = r.table(params, "transfer", ("link", "intra_link", "granularity", "layerwise"), "transfer")
    transfer = TransferCfg(
        r.string(tr, "link", "roce-mooncake", "transfer"),
        r.string(tr, "intra_link", "nvlink-h100", "transfer"),
        r.choice(tr, "granularity", "layer", GRANULARITIES, "transfer"),
        r.boolean(tr, "layerwise", True, "transfer"),
    )
    return ClusterCfg(
        source=r.path,
        model=model,
        pools=pools,
        layout=layout,
        router=router,
        router_params=router_params,
        transfer=transfer,
        tiers=_tiers(r, params),
        gpus_per_node=gpn,
        frontend_ns=ms_to_ns(r.num(params, "frontend_ms", 0.0, "")),
        prefix_caching=r.boolean(params, "prefix_caching", True, ""),
        prefix_block_tokens=r.num(params, "prefix_block_tokens", 512, "", 1, integer=True),
        spec_decode=_spec_decode(r, params),
        reschedule=_reschedule(r, params, layout),
        long_context=_long_context(r, params, pools),
    )


def location(source: str, key: str) -> str:
    """'file:line [key]' for errors found after parsing (catalog names, capacities)."""
    r = reader_for(source)
    return f"{where(r.path, r.text, key)} [{key}]"


def reader_for(source: str) -> _Reader:
    """A reader whose errors name `source` (for checks that need the physics catalog, done in target.py)."""
    path = Path(source)
    return _Reader(source or "<sim profile>", path.read_text(encoding="utf-8") if source and path.is_file() else "")
