"""The options of `kvbench replay`, with the spellings of vLLM's `bench serve` as first-class names of the same
options (--request-rate is --rate, --max-concurrency is --concurrency, --num-prompts is --max-requests, --goodput
is --slo), and the parse step that lets --goodput take vLLM's space-separated KEY:MS pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kvbench.analysis.slo import Slo, parse_slo
from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, SLO_HELP, TARGET, TIMING, WORKLOAD
from kvbench.config import ConfigError

DATASETS = ("random", "sharegpt")  # kvbench.workload.dataset's, named here so a typo fails before it is imported

MaxRequests = Annotated[
    int | None,
    typer.Option(
        "--max-requests",
        "--num-prompts",
        "-n",
        help="Replay at most N requests (--dataset-name: generate N; default 1000 there, as vLLM).",
        rich_help_panel=WORKLOAD,
    ),
]
Rate = Annotated[
    float | None,
    typer.Option(
        "--rate",
        "--request-rate",
        help="Re-time arrivals at this many requests/s: Poisson, or Gamma with --burstiness; inf sends all at "
        "t = 0 (vLLM's default with --dataset-name). On session workloads the session starts are re-timed (at "
        "R x sessions/requests): later turns wait for the previous answer and think time, so the achieved rate "
        "(in the summary) can fall short of R.",
        show_default="the trace's timestamps",
        rich_help_panel=TIMING,
    ),
]
Burstiness = Annotated[
    float,
    typer.Option(
        "--burstiness",
        help="Gamma shape of the gaps under --request-rate: 1 Poisson, < 1 burstier, > 1 smoother (vLLM's meaning).",
        rich_help_panel=TIMING,
    ),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        "--max-concurrency",
        "-c",
        help="At most N requests in flight; a request due while all N are taken waits for a slot. With "
        "--request-rate inf, or on a workload whose requests are all due at once, this is a closed loop of N users "
        "(as vLLM's), recorded and judged as one.",
        show_default="no cap",
        rich_help_panel=TIMING,
    ),
]
Users = Annotated[
    int | None,
    typer.Option(
        "--users",
        help="Closed loop: N users, each sending its next request when its previous one ends (plus --think-time); "
        "the workload's arrival times are ignored (GuideLLM's concurrent mode).",
        rich_help_panel=TIMING,
    ),
]
ThinkTime = Annotated[
    float,
    typer.Option(
        "--think-time", help="Closed loop: seconds a user waits between an answer and its next request.",
        rich_help_panel=TIMING,
    ),
]  # fmt: skip
SloOption = Annotated[
    str | None,
    typer.Option(
        "--slo",
        "--goodput",
        help=SLO_HELP + "; vLLM's --goodput ttft:200 tpot:50 also reads. Replaces the workload's SLOs of those keys.",
        show_default="the workload's SLOs",
        rich_help_panel=WORKLOAD,
    ),
]
DatasetName = Annotated[
    str | None,
    typer.Option(
        "--dataset-name",
        help="A vLLM dataset instead of --trace/--workload: random (--random-*) or sharegpt (--dataset-path).",
        rich_help_panel=WORKLOAD,
    ),
]
DatasetPath = Annotated[
    Path | None, typer.Option("--dataset-path", help="The ShareGPT JSON file of --dataset-name sharegpt.", rich_help_panel=WORKLOAD)
]  # fmt: skip
InputLen = Annotated[int, typer.Option("--random-input-len", help="random: prompt tokens.", rich_help_panel=WORKLOAD)]
OutputLen = Annotated[int, typer.Option("--random-output-len", help="random: output tokens.", rich_help_panel=WORKLOAD)]
RangeRatio = Annotated[
    float,
    typer.Option(
        "--random-range-ratio",
        help="random: lengths uniform from len x (1 - r) to len x (1 + r).",
        rich_help_panel=WORKLOAD,
    ),
]
PrefixLen = Annotated[
    int, typer.Option("--random-prefix-len", help="random: a prefix of this many tokens shared by every prompt.", rich_help_panel=WORKLOAD)
]  # fmt: skip
PercentileMetrics = Annotated[
    str,
    typer.Option(
        "--percentile-metrics", help="Metrics whose percentiles the vLLM result JSON holds: ttft,tpot,itl,e2el.",
        rich_help_panel=OUTPUT,
    ),
]  # fmt: skip
MetricPercentiles = Annotated[
    str,
    typer.Option(
        "--metric-percentiles", help="Percentiles of those metrics in the vLLM result JSON, e.g. 25,50,99.",
        rich_help_panel=OUTPUT,
    ),
]  # fmt: skip
SaveResult = Annotated[
    bool,
    typer.Option(
        "--save-result",
        help="Also write the results as `vllm bench serve --save-result` does (RUN/vllm_result.json unless "
        "--result-dir/--result-filename say where).",
        rich_help_panel=OUTPUT,
    ),
]
ResultDir = Annotated[
    Path | None,
    typer.Option(
        "--result-dir", help="Directory of the vLLM result JSON.", show_default="the run directory", rich_help_panel=OUTPUT
    ),
]  # fmt: skip
ResultFilename = Annotated[
    str | None,
    typer.Option(
        "--result-filename",
        help="File name of the vLLM result JSON.",
        show_default="vllm_result.json in the run directory; vLLM's name pattern in --result-dir",
        rich_help_panel=OUTPUT,
    ),
]
Tokenizer = Annotated[
    Path | None,
    typer.Option(
        "--tokenizer",
        help="A tokenizer.json (or its folder) counting the tokens of text workloads (ShareGPT); needs the "
        "`tokenizers` package (pip install 'kvbench\\[tokens]'). `server`: the HTTP target's /tokenize (llama-server, "
        "vLLM), asked before the run starts; the estimate, with a warning, if it has none.",
        show_default="ceil(characters / 4), recorded as an estimate in run.json",
        rich_help_panel=WORKLOAD,
    ),
]
Model = Annotated[
    str | None,
    typer.Option("--model", help="Model name sent to an endpoint (= --set model=NAME).", rich_help_panel=TARGET),
]

MULTI_VALUE = ("--goodput",)  # vLLM's nargs="+" options: the following bare words are more values


def join_values(args: list[str]) -> list[str]:
    """`--goodput ttft:200 tpot:50` as `--goodput ttft:200,tpot:50`: the words after a multi-value option, up to
    the next option, are joined with commas."""
    out: list[str] = []
    i = 0
    while i < len(args):
        out.append(args[i])
        if args[i] in MULTI_VALUE:
            values = []
            while i + 1 < len(args) and not args[i + 1].startswith("-"):
                values.append(args[i + 1])
                i += 1
            if values:
                out.append(",".join(values))
        i += 1
    return out


class ReplayCommand(Command):
    """`kvbench replay`: a Command whose --goodput reads vLLM's space-separated pairs."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, join_values(list(args)))


@dataclass(frozen=True)
class Timing:
    """When requests go: re-timed at `rate` (None: as the workload says), at most `concurrency` in flight, or a
    closed loop of `concurrency` users with `think_s` between an answer and the next request."""

    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    closed: bool = False
    think_s: float = 0.0


def timing(
    rate: float | None, burstiness: float, concurrency: int | None, users: int | None, think_s: float, dataset: bool
) -> Timing:
    """The timing options checked together. vLLM's --max-concurrency N with --request-rate inf (all due at once,
    N at a time) is a closed loop of N users; a --dataset-name run defaults to --request-rate inf, as vLLM's."""
    if users is not None and concurrency is not None:
        raise ConfigError("give --users N (closed loop) or --max-concurrency N (a cap), not both")
    for flag, n in (("--users", users), ("--max-concurrency", concurrency)):
        if n is not None and n < 1:
            raise ConfigError(f"{flag} must be >= 1, got {n}")
    if not (math.isfinite(think_s) and think_s >= 0):
        raise ConfigError(f"--think-time must be a finite number of seconds >= 0, got {think_s}")
    if rate is None and dataset:
        rate = math.inf
    if burstiness != 1.0 and rate is None:
        raise ConfigError("--burstiness shapes the gaps of --request-rate R: give --request-rate too")
    if users is not None and rate is not None and rate != math.inf:
        raise ConfigError("--users runs a closed loop, which ignores arrival times: drop --request-rate")
    closed = users is not None or (concurrency is not None and rate == math.inf)
    if think_s and not closed:
        raise ConfigError("--think-time is the pause of a closed loop's users: give --users N")
    return Timing(rate, burstiness, users or concurrency, closed, think_s)


def source(trace: Path | None, workload: str | None, dataset_name: str | None, dataset_path: Path | None) -> str:
    """trace | workload | dataset: exactly one of --trace, --workload, --dataset-name."""
    given = [k for k, v in (("trace", trace), ("workload", workload), ("dataset", dataset_name)) if v is not None]
    if dataset_path is not None and dataset_name is None:
        raise ConfigError("--dataset-path goes with --dataset-name sharegpt (or give the file as --trace FILE)")
    if len(given) != 1:
        raise ConfigError("give exactly one of --trace FILE, --workload NAME|FILE or --dataset-name random|sharegpt")
    if dataset_name is not None and dataset_name not in DATASETS:
        raise ConfigError(f"--dataset-name {dataset_name!r}: expected one of {', '.join(DATASETS)}")
    return given[0]


def check_file(path: Path | None) -> None:
    """--dataset-path exists and is a readable file."""
    if path is not None:
        from kvbench.workload.inputs import check_file as check

        check(path)


SERVER_TOKENIZER = "server"  # --tokenizer server: the target's /tokenize


def check_tokenizer(path: Path | None) -> None:
    """--tokenizer names a tokenizer.json (or a folder holding one), or is `server`."""
    if path is not None and str(path) != SERVER_TOKENIZER:
        from kvbench.workload.tokens import tokenizer_file

        tokenizer_file(path)


def check_slo(text: str | None) -> Slo | None:
    return None if text is None else parse_slo(text, "--slo (--goodput)")


@dataclass(frozen=True)
class ResultOptions:
    """Where and what the vLLM-shaped result JSON holds."""

    save: bool = False
    directory: Path | None = None
    filename: str | None = None
    metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    percentiles: tuple[float, ...] = (99.0,)


PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


def result_options(
    save: bool, directory: Path | None, filename: str | None, metrics: str, percentiles: str
) -> ResultOptions:
    names = tuple(m.strip() for m in metrics.split(",") if m.strip())
    bad = [m for m in names if m not in PERCENTILE_METRICS]
    if bad or not names:
        raise ConfigError(f"--percentile-metrics {metrics!r}: expected names from {','.join(PERCENTILE_METRICS)}")
    try:
        ps = tuple(float(p) for p in percentiles.split(","))
    except ValueError:
        raise ConfigError(f"--metric-percentiles {percentiles!r}: expected numbers, e.g. 25,50,99") from None
    if not all(0 <= p <= 100 for p in ps):
        raise ConfigError(f"--metric-percentiles {percentiles!r}: expected percentiles in 0..100")
    if filename is not None and (not filename or Path(filename).name != filename):
        raise ConfigError(f"--result-filename {filename!r}: a file name (use --result-dir for the folder)")
    return ResultOptions(save or directory is not None or filename is not None, directory, filename, names, ps)
