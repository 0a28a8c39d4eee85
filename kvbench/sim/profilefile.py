"""A sim profile's TOML as written: typed dataclasses that kvbench.config.read checks key by key (one-line errors
naming file, line and key); kvbench.sim.cluster derives the validated ClusterCfg from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from kvbench.config import NonEmpty, Range

Role = Literal["colocated", "pre_prefill", "prefill", "decode"]
GranularityName = Literal["layer-block", "layer", "request"]  # sim.transfer.GRANULARITIES (a test keeps them equal)
LongContextMode = Literal["pipeline", "context_parallel"]
Sharing = Literal["fifo", "fair"]  # sim.transfer.SHARING: how concurrent transfers share a link's wire
# Sizes no real deployment reaches, checked before anything is built: a typo (instances = 10000000) is a one-line
# error rather than gigabytes of engines. The largest published PD deployments run hundreds of nodes.
MAX_INSTANCES = 4096  # per pool
MAX_GPUS = 65_536  # instances x tp, summed over the pools
MAX_TOKEN_BUDGET = 1 << 24  # tokens per batch step (16,777,216)
MAX_RUNNING = 1 << 16  # requests in a running batch (65,536)
MAX_TOKENS = 1 << 40  # a tier's capacity or a threshold in tokens (~1.1e12)
Tokens = int | str  # a token count: 3000000 or "3M"
Link = Annotated[str, NonEmpty()]  # a link catalog name


@dataclass(frozen=True)
class EngineFile:
    token_budget: Annotated[int, Range(1, MAX_TOKEN_BUDGET)] = 8192
    max_running: Annotated[int, Range(1, MAX_RUNNING)] = 256
    block_tokens: Annotated[int, Range(1, 1 << 20)] = 16
    chunked_prefill: bool = True
    share_inflight: bool = False


@dataclass(frozen=True)
class PoolFile:
    role: Role
    gpu: Any  # the cost-model keys (gpu ... cost) are checked by the cost model (kvbench/sim/cost/config.py)
    instances: Annotated[int, Range(1, MAX_INSTANCES)] = 1
    tp: Annotated[int, Range(1)] | None = None  # <= gpus_per_node; None: 1
    token_budget: Annotated[int, Range(1, MAX_TOKEN_BUDGET)] | None = None  # None takes the [engine] table's value
    max_running: Annotated[int, Range(1, MAX_RUNNING)] | None = None
    block_tokens: Annotated[int, Range(1, 1 << 20)] | None = None
    chunked_prefill: bool | None = None
    share_inflight: bool | None = None
    model: Any = None
    mfu: Any = None
    mbu: Any = None
    step_overhead_ns: Any = None
    layer_overhead_ns: Any = None
    mem_fraction: Any = None
    dp_attention: Any = None
    allreduce_link: Any = None
    ep: Any = None  # the parallel-layout keys are checked by the cost model too (kvbench/sim/cost/parallel.py)
    pp: Any = None
    microbatches: Any = None
    fp8: Any = None
    ep_link: Any = None
    ep_intra_link: Any = None
    pp_link: Any = None
    profile: Any = None
    cost: Any = None  # "aic:BACKEND": step times from AIConfigurator (kvbench/sim/cost/aic.py)
    preempt: Literal["recompute", "swap"] = "recompute"
    swap_gib: Annotated[float, Range(0, open_lo=True)] = 4.0
    dram_link: Link = "pcie5"
    kv_landing: Literal["hbm", "dram"] = "hbm"


@dataclass(frozen=True)
class TransferFile:
    link: Link = "roce-mooncake"
    intra_link: Link = "nvlink-h100"
    granularity: GranularityName = "layer"
    layerwise: bool = True
    sharing: Sharing = "fifo"


@dataclass(frozen=True)
class TierFile:
    capacity_tokens: Tokens
    link: Link | dict[str, Any]  # a catalog name or an inline LinkSpec table
    write_through: bool = False
    layerwise: bool = False
    replicas: Annotated[int, Range(0, MAX_INSTANCES)] = 0  # the pool tier only
    replicate_hot: Annotated[int, Range(0)] = 0
    sharing: Sharing = "fifo"


@dataclass(frozen=True)
class TiersFile:
    dram: TierFile | None = None
    ssd: TierFile | None = None
    pool: TierFile | None = None


@dataclass(frozen=True)
class SpecDecodeFile:
    acceptance: tuple[Annotated[float, Range(0, 1)], ...]  # k probabilities
    k: Annotated[int, Range(1, 16)] = 3
    draft_model: str = ""
    draft_apart: bool = False
    draft_link: Link = "nvlink-h100"


@dataclass(frozen=True)
class RescheduleFile:
    interval_ms: Annotated[float, Range(0, open_lo=True)] = 500.0
    predictor_error: Annotated[float, Range(0, 10)] = 0.2
    imbalance: Annotated[float, Range(0)] = 0.25
    max_migrations: Annotated[int, Range(1)] = 4
    link: Link = "roce-mooncake"


@dataclass(frozen=True)
class LongContextFile:
    threshold_tokens: Tokens = 131_072
    instances: Annotated[int, Range(2)] = 2  # <= the prefill pool's instances
    mode: LongContextMode = "pipeline"


@dataclass(frozen=True)
class ClusterFile:
    """A sim profile's keys as written; parse_cluster derives the ClusterCfg from it."""

    kind: str = "sim"
    description: str = ""
    model: Any = "Llama-3.1-8B"  # catalog name or inline table (checked by the cost model)
    gpus_per_node: Annotated[int, Range(1, 1024)] = 8
    frontend_ms: Annotated[float, Range(0)] = 0.0
    prefix_caching: bool = True
    prefix_block_tokens: Annotated[int, Range(1, 1 << 20)] = 512
    engine: EngineFile = field(default_factory=EngineFile)
    pools: dict[str, PoolFile] = field(default_factory=dict)
    router: Any = "round_robin"  # a router name or a [router] table (its keys depend on the name)
    transfer: TransferFile = field(default_factory=TransferFile)
    tiers: TiersFile = field(default_factory=TiersFile)
    spec_decode: SpecDecodeFile | None = None
    reschedule: RescheduleFile | None = None
    long_context: LongContextFile | None = None
