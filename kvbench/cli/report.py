"""Command-line signatures of `kvbench report`, `kvbench goodput` and `kvbench timeline` (machinery imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, TARGET, TIMING, WORKLOAD, GoodputArrivals, Overrides, ReportFormat, WorkloadRef

SLO_EXAMPLE = "ttft=200,tpot=50,e2el=5000,tbt=100"


def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (several: figures overlay them, a table shows deltas "
            "against the first); a goodput output directory adds its curve.",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output file (HTML or Markdown).", rich_help_panel=OUTPUT)
    ] = Path("report.html"),
    fmt: Annotated[
        ReportFormat,
        typer.Option(
            "--format",
            "-f",
            help="html: one self-contained page with figures; md: a Markdown summary (e.g. a CI job summary).",
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
) -> None:
    """Write a report of one or more runs: metadata, summary table, latency CDFs, figures over time."""
    from kvbench.present.report import report_command

    report_command(runs, out, fmt.value, slo, bucket)


def goodput(
    *,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Trace file to replay at scaled rates.", rich_help_panel=WORKLOAD)
    ] = None,
    workload: WorkloadRef = None,
    max_requests: Annotated[
        int | None,
        typer.Option("--max-requests", "-n", help="Requests per probe run (the first N).", rich_help_panel=WORKLOAD),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every probe run.", rich_help_panel=WORKLOAD)] = 0,
    target: Annotated[
        str,
        typer.Option(
            "--target",
            "-t",
            help="Target, as for replay: sim[:PRESET], fixed:..., http://HOST:PORT/v1, profile.",
            rich_help_panel=TARGET,
        ),
    ],
    set_: Overrides = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            help="GPUs of the target, for goodput per GPU.",
            show_default="from the sim cluster spec",
            rich_help_panel=TARGET,
        ),
    ] = None,
    slo: Annotated[
        str, typer.Option("--slo", help="SLOs in ms a request must all meet to be good, e.g. ttft=200,tpot=50.")
    ],
    attainment: Annotated[
        float, typer.Option("--attainment", help="Target SLO attainment, fraction of requests sent (0..1].")
    ] = 0.9,
    precision: Annotated[
        float,
        typer.Option("--precision", help="Stop when the pass/fail bracket is this narrow, relative (0.05 = 5 %)."),
    ] = 0.05,
    start_rate: Annotated[
        float | None,
        typer.Option(
            "--start-rate",
            help="First probe rate in requests/s.",
            show_default="the trace's own rate",
            rich_help_panel=TIMING,
        ),
    ] = None,
    arrivals: Annotated[
        GoodputArrivals,
        typer.Option(
            "--arrivals",
            help="scale: time-scale the trace's arrivals; poisson: Poisson arrivals at the rate.",
            rich_help_panel=TIMING,
        ),
    ] = GoodputArrivals.scale,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Output directory: one subdirectory per probe run, goodput.json/csv.",
            show_default="reports/goodput-<time>",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
) -> None:
    """Find the highest request rate whose SLO attainment stays >= --attainment (DistServe goodput)."""
    from kvbench.plan.goodput import goodput_command

    raise typer.Exit(
        goodput_command(
            trace=trace,
            workload=workload,
            target=target,
            overrides=set_ or [],
            slo=slo,
            attainment=attainment,
            precision=precision,
            max_requests=max_requests,
            start_rate=start_rate,
            arrivals=arrivals.value,
            gpus=gpus,
            out=out,
            seed=seed,
        )
    )


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
    app.command(cls=Command)(goodput)
    app.command(cls=Command)(timeline)
