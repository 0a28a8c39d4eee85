"""Command-line signature of `kvbench replay` (its machinery, kvbench.cli.replay_run, is imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, TARGET, TIMING, WORKLOAD, Overrides, Trace, WorkloadRef

MaxRequests = Annotated[
    int | None, typer.Option("--max-requests", "-n", help="Replay at most N requests.", rich_help_panel=WORKLOAD)
]
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
TimeScale = Annotated[
    float,
    typer.Option(
        "--time-scale", help="Replay X times faster (2 halves every inter-arrival gap).", rich_help_panel=TIMING
    ),
]
Rate = Annotated[
    float | None,
    typer.Option(
        "--rate",
        help="Re-time arrivals as a Poisson process at this many requests/s. On session workloads the session "
        "starts are re-timed (at R x sessions/requests): later turns wait for the previous answer and think time, "
        "so the achieved rate (in the summary) can fall short of R.",
        rich_help_panel=TIMING,
    ),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        "-c",
        help="Closed loop: at most N requests in flight.",
        show_default="open loop at arrival times",
        rich_help_panel=TIMING,
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
    max_requests: MaxRequests = None,
    start: Start = 0.0,
    duration: Duration = None,
    seed: RunSeed = 0,
    target: Target = "sim",
    set_: Overrides = None,
    workers: Workers = 1,
    time_scale: TimeScale = 1.0,
    rate: Rate = None,
    concurrency: Concurrency = None,
    out: Out = None,
    overwrite: Overwrite = False,
    resume: Resume = False,
    quiet: Quiet = False,
) -> None:
    """Replay a workload against a target and write reports/<run-id>/ (events, requests, run.json)."""
    check_trace(trace)
    from kvbench.cli.replay_run import replay_command

    if resume:
        from kvbench.rundir import refuse_resume

        refuse_resume()

    code = replay_command(
        trace=trace,
        workload=workload,
        target=target,
        overrides=set_ or [],
        out=out,
        overwrite=overwrite,
        seed=seed,
        time_scale=time_scale,
        rate=rate,
        start=start,
        duration=duration,
        max_requests=max_requests,
        concurrency=concurrency,
        workers=workers,
        quiet=quiet,
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
    app.command(cls=Command)(replay)
