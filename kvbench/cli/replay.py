"""Command-line signature of `kvbench replay` (its machinery, kvbench.cli.replay_run, is imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli import replay_options as o
from kvbench.cli.options import OUTPUT, TARGET, TIMING, WORKLOAD, Overrides, Trace, WorkloadRef
from kvbench.cli.startup import unscanned_imports

Start = Annotated[
    float,
    typer.Option(
        "--start", help="Skip requests arriving before this many seconds into the trace.", rich_help_panel=WORKLOAD
    ),
]
Duration = Annotated[
    float | None,
    typer.Option(
        "--duration", help="Keep requests arriving within this many seconds after --start.", rich_help_panel=WORKLOAD
    ),
]
RunSeed = Annotated[
    int,
    typer.Option(
        "--seed", help="Seed for every random choice (workload generation, sim sampling).", rich_help_panel=WORKLOAD
    ),
]
Target = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        help="sim | sim:PRESET | adapters/X.toml | profile name | http://HOST:PORT/v1 | "
        "fixed:ttft_ms=50,itl_ms=10,servers=4.",
        rich_help_panel=TARGET,
    ),
]
Workers = Annotated[
    int,
    typer.Option("--workers", help="Shard sessions over N processes (real endpoints only).", rich_help_panel=TARGET),
]
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="auto|ADDRESS",
        help="Run the --workers shards as Ray actors spread over the cluster's nodes: 'auto' (a running cluster, "
        "else a local one) or a cluster address (real endpoints only; needs the extra kvbench\\[ray]).",
        rich_help_panel=TARGET,
    ),
]
TimeScale = Annotated[
    float,
    typer.Option(
        "--time-scale", help="Replay X times faster (2 halves every inter-arrival gap).", rich_help_panel=TIMING
    ),
]
Out = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Run directory.", show_default="reports/<run-id>/", rich_help_panel=OUTPUT),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace the run already in --out (else a non-empty --out is refused).",
        rich_help_panel=OUTPUT,
    ),
]
Resume = Annotated[bool, typer.Option("--resume", hidden=True)]  # not supported: says so rather than "no such option"
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.", rich_help_panel=OUTPUT)]


def replay(
    trace: Trace = None,
    workload: WorkloadRef = None,
    dataset_name: o.DatasetName = None,
    dataset_path: o.DatasetPath = None,
    random_input_len: o.InputLen = 1024,
    random_output_len: o.OutputLen = 128,
    random_range_ratio: o.RangeRatio = 0.0,
    random_prefix_len: o.PrefixLen = 0,
    tokenizer: o.Tokenizer = None,
    max_requests: o.MaxRequests = None,
    start: Start = 0.0,
    duration: Duration = None,
    seed: RunSeed = 0,
    slo: o.SloOption = None,
    target: Target = "sim",
    model: o.Model = None,
    set_: Overrides = None,
    workers: Workers = 1,
    ray: Ray = None,
    time_scale: TimeScale = 1.0,
    rate: o.Rate = None,
    burstiness: o.Burstiness = 1.0,
    concurrency: o.Concurrency = None,
    users: o.Users = None,
    think_time: o.ThinkTime = 0.0,
    out: Out = None,
    overwrite: Overwrite = False,
    resume: Resume = False,
    quiet: Quiet = False,
    save_result: o.SaveResult = False,
    result_dir: o.ResultDir = None,
    result_filename: o.ResultFilename = None,
    percentile_metrics: o.PercentileMetrics = "ttft,tpot,itl",
    metric_percentiles: o.MetricPercentiles = "99",
) -> None:
    """Replay a workload against a target and write reports/<run-id>/ (events, requests, run.json)."""
    # Argument and file errors before the replay machinery is imported (about a second of imports).
    source = o.source(trace, workload, dataset_name, dataset_path)
    check_trace(trace)
    o.check_file(dataset_path)
    o.check_tokenizer(tokenizer)
    result = o.result_options(save_result, result_dir, result_filename, percentile_metrics, metric_percentiles)
    timing = o.timing(rate, burstiness, concurrency, users, think_time, dataset_name is not None)
    parsed_slo = o.check_slo(slo)
    with unscanned_imports():
        from kvbench.cli.replay_run import replay_command

    if resume:
        from kvbench.rundir import refuse_resume

        refuse_resume()
    dataset = None
    if source == "dataset":
        from kvbench.workload.dataset import DEFAULT_PROMPTS, Dataset

        lengths = (random_input_len, random_output_len, random_range_ratio, random_prefix_len)
        prompts = max_requests or DEFAULT_PROMPTS
        dataset = Dataset(str(dataset_name), dataset_path, prompts, *lengths, tokenizer=str(tokenizer or ""))
    code = replay_command(
        trace=trace,
        workload=workload,
        dataset=dataset,
        tokenizer=str(tokenizer or ""),
        target=target,
        overrides=set_ or [],
        model=model,
        out=out,
        overwrite=overwrite,
        seed=seed,
        time_scale=time_scale,
        timing=timing,
        start=start,
        duration=duration,
        max_requests=max_requests,
        slo=parsed_slo,
        workers=workers,
        ray=ray,
        quiet=quiet,
        result=result,
    )
    raise typer.Exit(code)


SAMPLE_HINT = (
    "the sample trace is traces/kimi-sample.jsonl in a checkout; "
    "`kvbench trace gen kimi-sample -o kimi.jsonl` writes it"
)


def check_trace(trace: Path | None) -> None:
    """A missing or unreadable --trace file fails here, before the replay machinery is imported (about a second)."""
    if trace is None:
        return
    from kvbench.config import ConfigError
    from kvbench.workload.inputs import check_file

    try:
        check_file(trace)
    except ConfigError as e:
        raise ConfigError(f"{e} ({SAMPLE_HINT})") from None


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=o.ReplayCommand)(replay)
