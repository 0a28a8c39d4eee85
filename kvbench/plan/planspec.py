"""Plan specs: a TOML file naming a workload, a model, GPU types, a GPU budget, SLOs and the deployment space to
search (layouts, TP, GPU counts, routers, prefix-cache tiers), the successive-halving schedule and, optionally, a
price per GPU-hour of each GPU type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from kvbench.config import ConfigError, NonEmpty, Range
from kvbench.plan.prices import check_prices
from kvbench.plan.sweepspec import read_spec_file

Layout = Literal["colocated", "pd"]
TierSet = Literal["hbm", "dram", "pool"]  # HBM prefix cache only; + a host-DRAM tier; + DRAM and a shared pool


@dataclass(frozen=True)
class SearchFile:
    """The deployment space: every combination of these is a candidate (after pruning)."""

    layouts: tuple[Layout, ...] = ("colocated", "pd")
    tp: tuple[Annotated[int, Range(1, 64)], ...] = (1,)  # TP degrees; a PD candidate picks one per pool
    gpus: tuple[Annotated[int, Range(1)], ...] = ()  # GPUs a deployment uses in all; default: the budget
    gpu_types: tuple[Annotated[str, NonEmpty()], ...] = ("H100",)  # a PD candidate picks one per pool
    routers: tuple[Annotated[str, NonEmpty()], ...] = ("least_loaded",)
    tiers: tuple[TierSet, ...] = ("hbm",)
    dram_tokens: int | str = "3M"  # the DRAM tier's capacity per node, as a sim profile takes it
    pool_tokens: int | str = "50M"  # the shared pool's capacity


@dataclass(frozen=True)
class HalvingFile:
    """Successive halving: every candidate's goodput on the first `requests[0]` requests, the best `keep` share
    on the next prefix, ..., the best `final` on the last (the longest) with the final precision."""

    requests: tuple[Annotated[int, Range(2)], ...] = (200, 800, 3000)
    keep: Annotated[float, Range(0, 1, open_lo=True)] = 0.5
    final: Annotated[int, Range(1)] = 3
    precision: Annotated[float, Range(0, 1, open_lo=True)] = 0.2  # of the goodput searches before the last rung
    final_precision: Annotated[float, Range(0, 1, open_lo=True)] = 0.05


@dataclass(frozen=True)
class PlanFile:
    """The keys of a plan spec as written."""

    name: str | None = None  # default: the file's stem
    description: str = ""
    workload: str | None = None  # a workload name or spec path (relative to this file)
    trace: str | None = None  # or a trace file (relative to this file)
    base: Annotated[str, NonEmpty()] = "sim:pd-2p2d"  # a sim profile: engine, transfer and other keys kept as-is
    model: Annotated[str, NonEmpty()] = "Llama-3.1-8B"
    gpu_budget: Annotated[int, Range(1, 65_536)] = 8
    slo: Annotated[str, NonEmpty()] = "ttft=2000,tpot=100"
    attainment: Annotated[float, Range(0, 1, open_lo=True)] = 0.9
    seed: int = 0
    search: SearchFile = field(default_factory=SearchFile)
    halving: HalvingFile = field(default_factory=HalvingFile)
    prices: dict[str, Annotated[float, Range(0, open_lo=True)]] = field(default_factory=dict)  # $ per GPU-hour


@dataclass(frozen=True)
class PlanSpec:
    name: str
    source: str
    file: PlanFile
    workload: str | None  # resolved spec path
    trace: str | None  # resolved trace path
    gpus: tuple[int, ...]  # deployment sizes searched


def load_plan(path: str | Path) -> PlanSpec:
    """Read and check a plan spec (candidates are built and pruned by kvbench.plan.candidates)."""
    from kvbench.analysis.slo import parse_slo
    from kvbench.workload.inputs import find_workload

    p = Path(path)
    f, src = read_spec_file(p, PlanFile)
    try:
        parse_slo(f.slo)
    except ConfigError as e:
        raise src.error(("slo",), f"slo: {e}") from None
    gpus = f.search.gpus or (f.gpu_budget,)
    if max(gpus) > f.gpu_budget:
        raise src.bad(("search", "gpus"), f"GPU counts <= gpu_budget = {f.gpu_budget}", list(gpus))
    if list(f.halving.requests) != sorted(set(f.halving.requests)):
        raise src.bad(("halving", "requests"), "increasing request counts, one per rung", list(f.halving.requests))
    check_prices(f.prices, f.search.gpu_types, lambda key, why: src.error(("prices", *key), why))
    trace = None
    if f.trace is not None:
        trace = str(Path(f.trace) if Path(f.trace).is_absolute() else (p.parent / f.trace).resolve())
    workload = str(find_workload(f.workload, p.parent)) if f.workload is not None else None
    return PlanSpec(f.name or p.stem, str(p), f, workload, trace, tuple(sorted(set(gpus))))
