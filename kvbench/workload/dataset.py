"""vLLM `bench serve` datasets as kvbench workloads: --dataset-name random|sharegpt mapped onto a workload spec.

`random`: every prompt has input_len x U[1 - r, 1 + r] tokens (r = --random-range-ratio, bounds as vLLM's:
floor of the low end, ceiling of the high end) after an optional shared prefix of --random-prefix-len tokens,
and asks for output_len x U[1 - r, 1 + r] tokens; no two prompts share blocks except the prefix. `sharegpt`:
the conversations of --dataset-path through kvbench's ShareGPT reader (real text, replies' lengths where the
file has them). Both give --num-prompts requests (vLLM's default 1,000) at the arrivals of --request-rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.workload.arrivals import ArrivalSpec
from kvbench.workload.build import build
from kvbench.workload.dists import MAX_LEN, LengthSpec
from kvbench.workload.inputs import check_file
from kvbench.workload.spec import WorkloadSpec
from kvbench.workload.stream import Workload
from kvbench.workload.synth import PrefixSpec
from kvbench.workload.tokens import Tokenizer

DATASETS = ("random", "sharegpt")
DEFAULT_PROMPTS = 1000  # vLLM's --num-prompts default


@dataclass(frozen=True)
class Dataset:
    """The dataset options of `vllm bench serve` (its defaults)."""

    name: str
    path: Path | None = None
    num_prompts: int = DEFAULT_PROMPTS
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0
    tokenizer: Tokenizer = ""  # a tokenizer.json or a server's /tokenize counting sharegpt's tokens


def lengths(mean: int, ratio: float, flag: str) -> LengthSpec:
    """`mean` tokens, or uniform over [floor(mean(1 - r)), ceil(mean(1 + r))] integers, at least 1."""
    if not 0 <= mean <= MAX_LEN:
        raise ConfigError(f"{flag} must be 0..{MAX_LEN:,} tokens, got {mean}")
    if ratio == 0:
        return LengthSpec("fixed", tokens=max(1, mean))
    lo, hi = max(1, math.floor(mean * (1 - ratio))), max(1, math.ceil(mean * (1 + ratio)))
    return LengthSpec("uniform", min=lo, max=hi)


def dataset_workload(d: Dataset, arrivals: ArrivalSpec | None, seed: int) -> Workload:
    """The workload of a vLLM dataset at `arrivals` (None: all at t = 0, vLLM's default --request-rate inf)."""
    if d.name not in DATASETS:
        raise ConfigError(f"--dataset-name {d.name!r}: expected one of {', '.join(DATASETS)}")
    if d.num_prompts < 1:
        raise ConfigError(f"--num-prompts must be >= 1, got {d.num_prompts}")
    if not 0 <= d.range_ratio < 1:
        raise ConfigError(f"--random-range-ratio must be in [0, 1), got {d.range_ratio}")
    timing = arrivals or ArrivalSpec("at-once")
    if d.name == "random":
        spec = WorkloadSpec(
            name="random",
            source="--dataset-name random",
            kind="synthetic",
            requests=d.num_prompts,
            arrivals=timing,
            input=lengths(d.input_len, d.range_ratio, "--random-input-len"),
            output=lengths(d.output_len, d.range_ratio, "--random-output-len"),
            prefix=PrefixSpec(groups=1, tokens=d.prefix_len) if d.prefix_len > 0 else PrefixSpec(),
        )
        return build(spec, seed)
    if d.path is None:
        raise ConfigError("--dataset-name sharegpt needs --dataset-path FILE (a ShareGPT JSON file)")
    path = check_file(d.path)
    spec = WorkloadSpec(
        name=path.stem, source=str(path), kind="trace", path=str(path), format="sharegpt", requests=d.num_prompts,
        arrivals=timing, tokenizer=d.tokenizer,
    )  # fmt: skip
    return build(spec, seed)
