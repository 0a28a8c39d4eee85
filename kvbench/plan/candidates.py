"""The deployments a plan searches: every layout x TP x GPU count x GPU type x router x cache tiers of the spec as a
sim profile, less those that cannot fit the model in HBM or cannot meet the SLOs even unloaded (pruned, with why)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.config import ConfigError

if TYPE_CHECKING:
    from kvbench.analysis.slo import Slo
    from kvbench.plan.planspec import PlanSpec
    from kvbench.records import Request

TIER_LINKS = {"dram": "pcie5", "pool": "rdma-mooncake"}


@dataclass(frozen=True)
class Pool:
    role: str  # colocated | prefill | decode
    instances: int
    tp: int
    gpu: str


@dataclass(frozen=True)
class Candidate:
    layout: str  # colocated | pd
    pools: tuple[Pool, ...]
    router: str
    tiers: str  # hbm | dram | pool

    @property
    def gpus(self) -> int:
        return sum(p.instances * p.tp for p in self.pools)

    @property
    def name(self) -> str:
        """'colocated-8xtp1-H100-least_loaded-hbm', '3p5d-tp1.1-H100.H100-cache_aware-dram'."""
        if self.layout == "colocated":
            (p,) = self.pools
            shape = f"colocated-{p.instances}xtp{p.tp}-{p.gpu}"
        else:
            pre, dec = self.pools
            shape = f"{pre.instances}p{dec.instances}d-tp{pre.tp}.{dec.tp}-{pre.gpu}.{dec.gpu}"
        return f"{shape}-{self.router}-{self.tiers}"

    def dollars_per_hour(self, prices: Mapping[str, float]) -> float:
        """What the deployment's GPUs cost per hour: every pool's instances x TP x its GPU type's price."""
        return sum(p.instances * p.tp * prices[p.gpu] for p in self.pools)

    def describe(self) -> dict[str, Any]:
        """The candidate's settings as flat columns of plan.parquet."""
        first, last = self.pools[0], self.pools[-1]
        return {
            "layout": self.layout,
            "gpus": self.gpus,
            "prefill": first.instances if self.layout == "pd" else None,
            "decode": last.instances if self.layout == "pd" else None,
            "replicas": first.instances if self.layout == "colocated" else None,
            "tp": "/".join(str(p.tp) for p in self.pools),
            "gpu_type": "/".join(p.gpu for p in self.pools),
            "router": self.router,
            "tiers": self.tiers,
        }


def enumerate_candidates(spec: PlanSpec) -> list[Candidate]:
    """Every combination the spec's [search] names, in a fixed order (layouts, sizes, TP, GPUs, router, tiers)."""
    s = spec.file.search
    out: list[Candidate] = []
    for layout, total in itertools.product(s.layouts, spec.gpus):
        shapes = _colocated(total, s.tp, s.gpu_types) if layout == "colocated" else _pd(total, s.tp, s.gpu_types)
        for pools, router, tiers in itertools.product(shapes, s.routers, s.tiers):
            out.append(Candidate(layout, pools, router, tiers))
    return out


def _colocated(total: int, tps: tuple[int, ...], types: tuple[str, ...]) -> list[tuple[Pool, ...]]:
    return [(Pool("colocated", total // tp, tp, g),) for tp in tps for g in types if total % tp == 0]


def _pd(total: int, tps: tuple[int, ...], types: tuple[str, ...]) -> list[tuple[Pool, ...]]:
    """xPyD splits with x x tp_p + y x tp_d = total GPUs, x, y >= 1."""
    out: list[tuple[Pool, ...]] = []
    for tp_p, tp_d, g_p, g_d in itertools.product(tps, tps, types, types):
        for x in range(1, total // tp_p + 1):
            rest = total - x * tp_p
            if rest >= tp_d and rest % tp_d == 0:
                out.append((Pool("prefill", x, tp_p, g_p), Pool("decode", rest // tp_d, tp_d, g_d)))
    return out


def profile(spec: PlanSpec, cand: Candidate) -> dict[str, Any]:
    """The candidate as a sim profile: the base profile's keys with the model, pools, router and tiers replaced."""
    from kvbench.targets import resolve

    base = resolve(spec.file.base)
    if base.kind != "sim":
        raise ConfigError(f"{spec.source}: base = {spec.file.base!r} is a {base.kind!r} target, not a sim profile")
    params = copy.deepcopy(base.params)
    s = spec.file.search
    params["description"] = f"{cand.name}: planned by kvbench plan {spec.name} ({spec.file.model})"
    params["model"] = spec.file.model
    params["pools"] = {p.role: {"role": p.role, "instances": p.instances, "gpu": p.gpu, "tp": p.tp} for p in cand.pools}
    params["router"] = {"name": cand.router}
    params["prefix_caching"] = True
    tiers: dict[str, Any] = {}
    if cand.tiers in ("dram", "pool"):
        tiers["dram"] = {"capacity_tokens": s.dram_tokens, "link": TIER_LINKS["dram"]}
    if cand.tiers == "pool":
        tiers["pool"] = {"capacity_tokens": s.pool_tokens, "link": TIER_LINKS["pool"], "write_through": True}
    params["tiers"] = tiers
    params.pop("long_context", None)  # sized for the base's pools, not the candidate's
    if cand.layout == "colocated":
        params.pop("reschedule", None)  # decode rescheduling needs a decode pool
    return params


def prune(spec: PlanSpec, cand: Candidate, params: dict[str, Any], requests: list[Request], slo: Slo) -> str:
    """Why the candidate cannot pass ('' when it may): its profile is invalid, the model does not fit a pool's
    HBM, or more than 1 - attainment of the requests miss an SLO even alone on an idle cluster (their prompt's
    uncached part prefilled in one step, one decode step at batch 1), which no load can improve on."""
    from kvbench.sim.build import pool_costs
    from kvbench.sim.cluster import parse_cluster

    try:
        cfg = parse_cluster(params, spec.source)
        costs = pool_costs(cfg)  # refuses a model whose weights exceed a pool's HBM
    except ConfigError as e:
        text = str(e).rpartition("]: ")[2]
        return f"does not fit: {text}" if "does not fit" in text else f"invalid: {text}"
    first, last = costs[cfg.pools[0].name], costs[cfg.pools[-1].name]
    late = _late_share(requests, slo, first, last)
    if late > 1 - spec.file.attainment:
        return f"SLO unreachable: {late:.0%} of requests miss it even on an idle cluster"
    return ""


def _late_share(requests: list[Request], slo: Slo, prefill: Any, decode: Any) -> float:
    """Share of requests whose idle-cluster TTFT or TPOT bound exceeds the SLO (an infinite prefix cache assumed:
    only the blocks no earlier request had are prefilled)."""
    from kvbench.units import ms_to_ns

    seen: set[int] = set()
    late = 0
    for r in requests:
        cached = 0
        for h in r.hash_ids:
            if h not in seen:
                break
            cached += 1
        seen.update(r.hash_ids)
        cached_tokens = min(cached * r.block_tokens, r.input_tokens - 1)
        ttft = prefill.step_ns(r.input_tokens - cached_tokens, cached_tokens, 0, 0)
        tpot = decode.step_ns(0, 0, 1, r.input_tokens)
        late += (slo.ttft_ms is not None and ttft > ms_to_ns(slo.ttft_ms)) or (
            slo.tpot_ms is not None and r.output_tokens > 1 and tpot > ms_to_ns(slo.tpot_ms)
        )
    return late / max(1, len(requests))
