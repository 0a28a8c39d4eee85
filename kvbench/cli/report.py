"""Command-line signatures of `kvbench report` and `kvbench timeline` (machinery imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, ReportFormat

SLO_EXAMPLE = "ttft=200,tpot=50,e2el=5000,tbt=100"

Baseline = Annotated[
    Path | None,
    typer.Option(
        "--baseline", help="The run the others are compared with (one of RUNS).", show_default="the first run"
    ),
]
KeepOrder = Annotated[
    bool, typer.Option("--keep-order", help="Keep the runs in the order given (else natural: rate-5 before rate-10).")
]


def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (several: figures overlay them, a table shows deltas "
            "against the baseline); a goodput output directory adds its curve; a `kvbench plan` directory adds its "
            "ranking, Pareto fronts and rungs; a sim run and a real run of one workload add a fidelity section.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output file; - writes to stdout.", rich_help_panel=OUTPUT),
    ] = None,
    fmt: Annotated[
        ReportFormat,
        typer.Option(
            "--format",
            "-f",
            help="html: one self-contained page with figures (report.html); md: a Markdown summary, e.g. a CI job "
            "summary (report.md).",
            rich_help_panel=OUTPUT,
        ),
    ] = ReportFormat.html,
    slo: Annotated[
        str | None,
        typer.Option("--slo", help=f"SLOs in ms, e.g. {SLO_EXAMPLE}.", show_default="the workload's, from run.json"),
    ] = None,
    bucket: Annotated[
        float | None,
        typer.Option(
            "--bucket",
            help="Time-bucket width of the over-time figures, in seconds.",
            show_default="about 240 buckets per run",
        ),
    ] = None,
    baseline: Baseline = None,
    keep_order: KeepOrder = False,
) -> None:
    """Write a report of one or more runs: deployment, summary, comparison with CIs, figures (report.html or report.md)."""
    from kvbench.present.report import report_command

    report_command(runs, out, fmt.value, slo, bucket, baseline, keep_order)


def timeline(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output Chrome-trace JSON (open in Perfetto).", rich_help_panel=OUTPUT)
    ] = Path("trace.json"),
    max_requests: Annotated[
        int,
        typer.Option(
            "--max-requests",
            "-n",
            help="Export at most N requests (the earliest arrivals), to bound the file size.",
            rich_help_panel=OUTPUT,
        ),
    ] = 20_000,
) -> None:
    """Export a run as Chrome Trace Event JSON: sim instances with batch steps, request phases on lanes."""
    from kvbench.config import ConfigError
    from kvbench.present.timeline import write_trace

    if max_requests < 1:
        raise ConfigError(f"--max-requests must be >= 1, got {max_requests}")
    try:
        info = write_trace(run, out, max_requests)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # DuckDB/Arrow errors on missing or foreign Parquet: name the run, keep one line
        if type(e).__module__.split(".")[0] not in ("duckdb", "_duckdb", "pyarrow"):
            raise
        raise ConfigError(f"{run}: cannot read the event log ({str(e).splitlines()[0]})") from None
    typer.echo(f"{out}: {info['note']}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=Command)(report)
    app.command(cls=Command)(timeline)
