"""Builds a simulated cluster from a validated ClusterCfg: cost models, engines placed on nodes, KV tiers, links."""

from __future__ import annotations

import random

from kvbench.config import ConfigError
from kvbench.sim.cluster import ClusterCfg, location
from kvbench.sim.cost.config import cost_model
from kvbench.sim.engine import Engine
from kvbench.sim.kvcache import Tier
from kvbench.sim.pricer import PlainPricer, SpecPricer
from kvbench.sim.spec import link, link_from
from kvbench.sim.transfer import SharedLink


class Links:
    """One SharedLink per (node, link name): concurrent transfers leaving one node queue on its NIC."""

    __slots__ = ("specs", "shared")

    def __init__(self) -> None:
        self.specs: dict[str, object] = {}
        self.shared: dict[tuple[int, str], SharedLink] = {}

    def spec(self, ref, where: str):
        """LinkSpec for a catalog name or an inline table (as stored in the config: a tuple of items)."""
        key = ref if isinstance(ref, str) else repr(ref)
        if key not in self.specs:
            self.specs[key] = link(ref, where) if isinstance(ref, str) else link_from(dict(ref), where, "inline")
        return self.specs[key]

    def on(self, node: int, ref, where: str = "") -> SharedLink:
        spec = self.spec(ref, where)
        key = (node, spec.name if isinstance(ref, str) else repr(ref))
        sl = self.shared.get(key)
        if sl is None:
            sl = self.shared[key] = SharedLink(spec)
        return sl


def _where(cfg: ClusterCfg, key: str) -> str:
    return location(cfg.source, key)


def pool_costs(cfg: ClusterCfg) -> dict[str, object]:
    """Cost model per pool (errors name the file and the pool's table)."""
    return {p.name: cost_model(dict(p.cost), _where(cfg, f"pools.{p.name}")) for p in cfg.pools}


def make_pricer(cfg: ClusterCfg, cost, links: Links, rng: random.Random):
    sd = cfg.spec_decode
    if sd is None:
        return PlainPricer(cost)
    draft = None
    if sd.draft_model:
        # the draft runs on the target's GPU type, one GPU (its own device when draft_apart)
        draft = cost_model({"model": sd.draft_model, "gpu": cost.gpu.name}, _where(cfg, "spec_decode.draft_model"))
    msg_link = links.spec(sd.draft_link, _where(cfg, "spec_decode.draft_link")) if sd.draft_apart else None
    return SpecPricer(cost, draft, msg_link, sd.k, sd.acceptance, rng)


def make_tiers(cfg: ClusterCfg, n_nodes: int, kv_bytes: int, links: Links):
    """Node tiers (dram, ssd: one per node) and the cluster pool; each demotes to the next one down."""
    pool = None
    by_node: dict[int, dict[str, Tier]] = {n: {} for n in range(n_nodes)}
    pbt = cfg.prefix_block_tokens
    for tc in reversed(cfg.tiers):  # build bottom-up so each tier knows the one below
        where = _where(cfg, f"tiers.{tc.kind}")
        if tc.kind == "pool":
            pool = Tier("pool", "pool", tc.capacity_tokens // pbt, None, links.on(-1, tc.link, where))
            continue
        for n in range(n_nodes):
            below = (by_node[n].get("ssd") if tc.kind == "dram" else None) or pool
            by_node[n][tc.kind] = Tier(
                f"{tc.kind}:node-{n}", tc.kind, tc.capacity_tokens // pbt, below, links.on(n, tc.link, where)
            )
    return by_node, pool


def make_engines(cfg: ClusterCfg, sim, costs: dict, links: Links, rows, rng: random.Random):
    """Engines of every pool, packed onto nodes of gpus_per_node GPUs in pool order."""
    engines, gpu_at = [], 0
    gpn = cfg.gpus_per_node
    for p in cfg.pools:
        cost = costs[p.name]
        if cfg.prefix_block_tokens % p.block_tokens:
            raise ConfigError(
                f"{_where(cfg, f'pools.{p.name}')}: key 'block_tokens' = {p.block_tokens} must divide "
                f"prefix_block_tokens = {cfg.prefix_block_tokens}"
            )
        if p.chunked_prefill and p.max_running >= p.token_budget:
            raise ConfigError(
                f"{_where(cfg, f'pools.{p.name}')}: key 'max_running' = {p.max_running} must be below "
                f"token_budget = {p.token_budget} (decode tokens count toward the budget)"
            )
        for i in range(p.instances):
            if gpu_at % gpn + p.tp > gpn:  # an instance never straddles two nodes
                gpu_at += gpn - gpu_at % gpn
            node = gpu_at // gpn
            gpu_at += p.tp
            name = f"{p.role.replace('_', '-')}-{i}"
            pricer = make_pricer(cfg, cost, links, rng)
            hbm = None
            if cfg.prefix_caching and p.role != "decode":
                hbm = Tier(f"hbm:{name}", "hbm", 0)
            engines.append(
                Engine(
                    name,
                    p.role,
                    node,
                    p,
                    cost.kv_capacity_tokens(),
                    pricer,
                    sim,
                    sim.loop,
                    cfg.prefix_block_tokens,
                    hbm,
                    rows,
                    len(engines),
                )
            )
    return engines, -(-gpu_at // gpn)
