"""The built cluster: engines placed on nodes with their cost models, KV tiers and shared links, from a ClusterCfg.

It holds no request state: the request lifecycle (target.py) drives it, and routers, the long-context split and
STAR rescheduling see it through their own small Protocols.
"""

from __future__ import annotations

import random

from kvbench.config import ConfigError
from kvbench.sim.cluster import ClusterCfg, PoolCfg, location
from kvbench.sim.cost import StepCost
from kvbench.sim.cost.config import cost_model
from kvbench.sim.engine import Engine
from kvbench.sim.engine_types import EngineHost
from kvbench.sim.hostmem import HostMemory
from kvbench.sim.kvcache import InflightShare, Tier
from kvbench.sim.loop import Loop
from kvbench.sim.pricer import PlainPricer, SpecPricer, StepPricer
from kvbench.sim.replica import PoolReplicas
from kvbench.sim.rows import AppendStep
from kvbench.sim.spec import LinkSpec
from kvbench.sim.transfer import Granularity, LinkRef, Links, SharedLink, message_count

FIRST_ROLES = ("colocated", "prefill", "pre_prefill")  # engines a request is routed to first


class Cluster:
    """Engines, tiers and links of one simulated deployment, and the lookups the request paths need."""

    __slots__ = (
        "cfg",
        "model",
        "kv_bytes",
        "gran",
        "links",
        "transfer_link",
        "engines",
        "by_role",
        "first",
        "decode",
        "node_tiers",
        "pool",
        "chains",
        "write_through",
        "layerwise_loads",
        "prefix_block_tokens",
        "replicas",
        "hostmem",
        "_pool_link",
        "_p2d",
    )

    def __init__(
        self, cfg: ClusterCfg, host: EngineHost[Engine], loop: Loop, rows: AppendStep, rng: random.Random
    ) -> None:
        self.cfg = cfg
        self.links = links = Links(loop, fair_links(cfg))
        for key, ref in (
            ("transfer.link", cfg.transfer.link),
            ("transfer.intra_link", cfg.transfer.intra_link),
            ("reschedule.link", cfg.reschedule.link if cfg.reschedule else None),
        ):
            if ref is not None:  # check names now: a bad one must fail before the simulation, not mid-run
                links.spec(ref, location(cfg.source, key))
        self.transfer_link = links.spec(cfg.transfer.link, "")  # P->D between nodes
        costs = pool_costs(cfg)
        self.model = next(iter(costs.values())).model
        self.kv_bytes = self.model.kv_bytes_per_token()
        self.gran = Granularity(cfg.transfer.granularity)
        self.prefix_block_tokens = cfg.prefix_block_tokens
        self.engines, n_nodes = make_engines(cfg, host, loop, costs, links, rows, rng)
        self.node_tiers, self.pool = make_tiers(cfg, n_nodes, self.kv_bytes, links)
        self._pool_link = next((tc.link for tc in cfg.tiers if tc.kind == "pool"), None)
        self.replicas: PoolReplicas | None = None  # placed pool copies (tiers.pool.replicas), else None
        for tc in cfg.tiers:
            if tc.replicas and self.pool is not None:
                block = (cfg.prefix_block_tokens, cfg.prefix_block_tokens * self.kv_bytes)
                hot = (tc.replicas, tc.replicate_hot)
                self.replicas = PoolReplicas(self.pool, links, tc.link, n_nodes, hot, block, self.messages)
        for e in self.engines:
            if e.hbm is not None:
                e.hbm.below = self._chain_below(e.node)
        self.by_role: dict[str, list[Engine]] = {}
        for e in self.engines:
            self.by_role.setdefault(e.role, []).append(e)
        self.first = [e for e in self.engines if e.role in FIRST_ROLES]
        self.decode = self.by_role.get("decode", [])
        self.chains = {
            e: [t for t in [e.hbm, *self.node_tiers[e.node].values(), self.pool] if t is not None] for e in self.first
        }
        self.write_through = [
            t for t in self.shared_chain() if any(tc.kind == t.kind and tc.write_through for tc in cfg.tiers)
        ]
        self.layerwise_loads = frozenset(tc.kind for tc in cfg.tiers if tc.layerwise)  # tiers loaded layer-wise
        self._p2d: dict[tuple[int, int], tuple[SharedLink, str]] = {}  # (src index, dst index) -> (link, detail)
        self.hostmem = HostMemory(links, self.kv_bytes, self.messages)  # swap preemption, DRAM landings
        pools = {p.role: p for p in cfg.pools}
        for e in self.engines:
            where = _where(cfg, f"pools.{pools[e.role].name}.dram_link")
            self.hostmem.add(e, pools[e.role], links, where, cfg.gpus_per_node)

    def _chain_below(self, node: int) -> Tier | None:
        tiers = self.node_tiers[node]
        return tiers.get("dram") or tiers.get("ssd") or self.pool

    def node_tier(self, engine: Engine, kind: str) -> Tier | None:
        return self.node_tiers[engine.node].get(kind)

    def shared_chain(self) -> list[Tier]:
        """Tiers every prefill instance can load from: the first node's DRAM/SSD stand for 'a node' and the pool."""
        node0 = self.node_tiers.get(0, {})
        return [t for t in [*node0.values(), self.pool] if t is not None]

    def pool_link_on(self, node: int) -> SharedLink:
        """Pool blocks are spread over all nodes (hot ones replicated, as Mooncake Store does), so a load from the
        pool is bounded by the loading node's own NIC: one shared link per destination node."""
        assert self._pool_link is not None, "no pool tier"
        return self.links.on(node, self._pool_link)

    def write_blocks(self, src: Engine, hashes: tuple[int, ...], t: int) -> None:
        """A prefill's blocks into the write-through tiers (its node's, and the pool); the blocks a tier did not hold
        cost their bytes on the link they travel over from `src` (the pool: src's NIC, as loads from it do)."""
        pbt = self.prefix_block_tokens
        for kind_tier in self.write_through:
            tier = kind_tier if kind_tier is self.pool else self.node_tiers[src.node][kind_tier.kind]
            before = tier.inserted
            if tier is self.pool and self.replicas is not None:
                self.replicas.wrote(hashes, src.node)  # the blocks it did not hold live on src's node
            tier.insert(hashes)
            new = (tier.inserted - before) * pbt
            if new:
                link = self.pool_link_on(src.node) if tier is self.pool else tier.wire()
                link.send(t, new * self.kv_bytes, self.messages(new, src.block_tokens), None)

    def link_between(self, src: Engine, dst: Engine, between_nodes: LinkRef) -> SharedLink:
        """The shared link KV leaves `src` on towards `dst`: the intra-node link, or `between_nodes`."""
        return self.links.on(src.node, self.cfg.transfer.intra_link if src.node == dst.node else between_nodes)

    def p2d(self, src: Engine, dst: Engine) -> tuple[SharedLink, str]:
        """(SharedLink, event detail) of P->D transfers from src to dst (looked up once per engine pair)."""
        found = self._p2d.get((src.index, dst.index))
        if found is None:
            found = self._p2d[(src.index, dst.index)] = (
                self.link_between(src, dst, self.cfg.transfer.link),
                f"to {dst.name}",
            )
        return found

    def messages(self, tokens: int, block_tokens: int) -> int:
        """Messages that move `tokens` tokens of KV paged in blocks of `block_tokens` (the profile's granularity)."""
        return message_count(self.model, tokens, block_tokens, self.gran)


def fair_links(cfg: ClusterCfg) -> frozenset[LinkRef]:
    """Links the profile shares fairly (`sharing = "fair"` on the transfer table or a tier)."""
    fair: set[LinkRef] = {tc.link for tc in cfg.tiers if tc.sharing == "fair"}
    if cfg.transfer.sharing == "fair":
        fair |= {cfg.transfer.link, cfg.transfer.intra_link}
    return frozenset(fair)


def _where(cfg: ClusterCfg, key: str) -> str:
    return location(cfg.source, key)


def pool_costs(cfg: ClusterCfg) -> dict[str, StepCost]:
    """Cost model per pool (errors name the file and the pool's table)."""
    return {p.name: cost_model(dict(p.cost), _where(cfg, f"pools.{p.name}")) for p in cfg.pools}


def make_pricer(cfg: ClusterCfg, cost: StepCost, links: Links, rng: random.Random) -> StepPricer:
    sd = cfg.spec_decode
    if sd is None:
        return PlainPricer(cost)
    draft = None
    if sd.draft_model:
        # the draft runs on the target's GPU type, one GPU (its own device when draft_apart)
        draft = cost_model({"model": sd.draft_model, "gpu": cost.gpu.name}, _where(cfg, "spec_decode.draft_model"))
    msg_link: LinkSpec | None = None
    if sd.draft_apart:
        msg_link = links.spec(sd.draft_link, _where(cfg, "spec_decode.draft_link"))
    return SpecPricer(cost, draft, msg_link, sd.k, sd.acceptance, rng)


def make_tiers(
    cfg: ClusterCfg, n_nodes: int, kv_bytes: int, links: Links
) -> tuple[dict[int, dict[str, Tier]], Tier | None]:
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


def _check_pool(cfg: ClusterCfg, p: PoolCfg) -> None:
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


def make_engines(
    cfg: ClusterCfg,
    host: EngineHost[Engine],
    loop: Loop,
    costs: dict[str, StepCost],
    links: Links,
    rows: AppendStep,
    rng: random.Random,
) -> tuple[list[Engine], int]:
    """Engines of every pool, packed onto nodes of gpus_per_node GPUs in pool order; and the number of nodes."""
    engines: list[Engine] = []
    gpu_at, gpn = 0, cfg.gpus_per_node
    for p in cfg.pools:
        cost = costs[p.name]
        _check_pool(cfg, p)
        size = p.instance_gpus
        for i in range(p.instances):
            if gpu_at % gpn and gpu_at % gpn + size > gpn:  # an instance starts a node unless it fits the rest
                gpu_at += gpn - gpu_at % gpn
            node = gpu_at // gpn  # a multi-node instance (EP, PP) is named by its first node
            gpu_at += size
            name = f"{p.role.replace('_', '-')}-{i}"
            pricer = make_pricer(cfg, cost, links, rng)
            hbm = Tier(f"hbm:{name}", "hbm", 0) if cfg.prefix_caching and p.role != "decode" else None
            if hbm is not None and p.share_inflight:
                hbm.share = InflightShare(hbm, cfg.prefix_block_tokens)
            kv = cost.kv_capacity_tokens()
            pbt = cfg.prefix_block_tokens
            engines.append(Engine(name, p.role, node, p, kv, pricer, host, loop, pbt, hbm, rows, len(engines)))
    return engines, -(-gpu_at // gpn)
