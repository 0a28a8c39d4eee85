"""The `kvbench` command line: a thin typer app; heavy imports happen inside commands so --help is instant."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kvbench.cli.command import Command, Group
from kvbench.cli.options import OUTPUT, TARGET, TIMING, WORKLOAD, Overrides, Trace, WorkloadRef
from kvbench.config import ConfigError

app = typer.Typer(
    name="kvbench",
    cls=Group,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Replay LLM-serving workloads against a simulated PD cluster or a real OpenAI-compatible endpoint; "
    "every run writes one Parquet event log that summaries, reports and CI gates are computed from.",
)

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _version(value: bool) -> None:
    if value:
        from kvbench import __version__

        print(f"kvbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Exit codes: 0 ok, 1 failed run or gate regression, 2 bad input, 130 interrupted."""


@app.command(cls=Command)
def replay(
    trace: Trace = None,
    workload: WorkloadRef = None,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", "-n", help="Replay at most N requests.", rich_help_panel=WORKLOAD)
    ] = None,
    start: Annotated[
        float,
        typer.Option(
            "--start", help="Skip requests arriving before this many seconds into the trace.", rich_help_panel=WORKLOAD
        ),
    ] = 0.0,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Keep requests arriving within this many seconds after --start.",
            rich_help_panel=WORKLOAD,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", help="Seed for every random choice (workload generation, sim sampling).", rich_help_panel=WORKLOAD
        ),
    ] = 0,
    target: Annotated[
        str,
        typer.Option(
            "--target",
            "-t",
            help="sim | sim:PRESET | adapters/X.toml | profile name | http://HOST:PORT/v1 | "
            "fixed:ttft_ms=50,itl_ms=10,servers=4.",
            rich_help_panel=TARGET,
        ),
    ] = "sim",
    set_: Overrides = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", help="Shard sessions over N processes (real endpoints only).", rich_help_panel=TARGET
        ),
    ] = 1,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale", help="Replay X times faster (2 halves every inter-arrival gap).", rich_help_panel=TIMING
        ),
    ] = 1.0,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate", help="Re-time arrivals as a Poisson process at this many requests/s.", rich_help_panel=TIMING
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            help="Closed loop: at most N requests in flight.",
            show_default="open loop at arrival times",
            rich_help_panel=TIMING,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory.", show_default="reports/<run-id>/", rich_help_panel=OUTPUT),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or summary.", rich_help_panel=OUTPUT)
    ] = False,
) -> None:
    """Replay a workload against a target and write reports/<run-id>/ (events, requests, run.json)."""
    from kvbench.cli.replay import replay_command

    code = replay_command(
        trace=trace,
        workload=workload,
        target=target,
        overrides=set_ or [],
        out=out,
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


def _register_subcommands() -> None:
    # Each module only declares typer signatures and imports its machinery lazily inside the command bodies.
    from kvbench.cli import metrics, report, serve, sim, trace

    for module in (trace, sim, metrics, report, serve):
        module.register(app)


_register_subcommands()


def _stdout_file() -> tuple[int, int] | None:
    """(device, inode) of the file behind stdout's descriptor, None when stdout is not a real file."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # e.g. captured in-process by a test runner
        return None
    return st.st_dev, st.st_ino


def _discard_stdout() -> None:
    # Point stdout's descriptor at /dev/null so the interpreter's final flush of what is still buffered cannot
    # fail again ("Exception ignored ... BrokenPipeError" and exit 120): recipe from the `signal` docs' SIGPIPE note.
    if _stdout_file() is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _exit(code: int | str | None) -> NoReturn:
    """Exit with `code`, first flushing stdout so a reader that has gone is noticed here: exit 0 quietly then."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        code = EXIT_OK
    sys.exit(code)


def main() -> None:
    stdout, stdout_file = sys.stdout, _stdout_file()
    try:
        app()
    except SystemExit as e:
        # Both libraries that print for us turn EPIPE into exit 1 before we can see it. typer's click
        # (typer/core.py _main) wraps sys.stdout in a PacifyFlushWrapper (attribute .wrapped); rich
        # (Console.on_broken_pipe) dup2()s /dev/null over stdout's descriptor. Either means the reader has gone.
        if getattr(sys.stdout, "wrapped", None) is stdout or _stdout_file() != stdout_file:
            _discard_stdout()
            sys.exit(EXIT_OK)
        _exit(e.code)
    except ConfigError as e:
        print(f"kvbench: error: {e}", file=sys.stderr)
        _exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print("kvbench: interrupted", file=sys.stderr)
        _exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _discard_stdout()
        sys.exit(EXIT_OK)
