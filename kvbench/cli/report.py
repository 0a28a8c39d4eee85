"""Command-line signatures of `kvbench report`, `kvbench goodput` and `kvbench timeline` (machinery imported lazily)."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    runs: list[Path] = typer.Argument(
        ...,
        help="Run directories (several: figures overlay them, a table shows deltas "
        "against the first); a goodput output directory adds its curve.",
    ),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="Output file (HTML or Markdown)."),
    fmt: str = typer.Option(
        "html",
        "--format",
        "-f",
        help="html: one self-contained page with figures; md: a Markdown summary (e.g. a CI job summary).",
    ),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="SLOs in ms, e.g. ttft=200,tpot=50,e2el=5000,tbt=100 [default: the workload's, from run.json].",
    ),
    bucket: float | None = typer.Option(
        None,
        "--bucket",
        help="Time-bucket width of the over-time figures, in seconds [default: about 240 buckets per run].",
    ),
) -> None:
    """Write a report of one or more runs: metadata, summary table, latency CDFs, figures over time."""
    from kvbench.present.report import report_command

    report_command(runs, out, fmt, slo, bucket)


def goodput(
    trace: Path | None = typer.Option(None, "--trace", help="Trace file to replay at scaled rates."),
    workload: str | None = typer.Option(
        None, "--workload", "-w", help="Workload spec: a name in workloads/ or a TOML path."
    ),
    target: str = typer.Option(
        ..., "--target", "-t", help="Target, as for replay: sim[:PRESET], fixed:..., http://HOST:PORT/v1, profile."
    ),
    set_: list[str] = typer.Option([], "--set", help="Override a target profile field (repeatable)."),
    slo: str = typer.Option(..., "--slo", help="SLOs in ms a request must all meet to be good, e.g. ttft=200,tpot=50."),
    attainment: float = typer.Option(
        0.9, "--attainment", help="Target SLO attainment, fraction of requests sent (0..1]."
    ),
    precision: float = typer.Option(
        0.05, "--precision", help="Stop when the pass/fail bracket is this narrow, relative (0.05 = 5 %)."
    ),
    max_requests: int | None = typer.Option(None, "--max-requests", "-n", help="Requests per probe run (the first N)."),
    start_rate: float | None = typer.Option(
        None, "--start-rate", help="First probe rate in requests/s [default: the trace's own rate]."
    ),
    arrivals: str = typer.Option(
        "scale", "--arrivals", help="scale: time-scale the trace's arrivals; poisson: Poisson arrivals at the rate."
    ),
    gpus: int | None = typer.Option(
        None, "--gpus", help="GPUs of the target, for goodput per GPU [default: from the sim cluster spec]."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Output directory: one subdirectory per probe run, goodput.json/csv [default: reports/goodput-<time>].",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of every probe run."),
) -> None:
    """Find the highest request rate whose SLO attainment stays >= --attainment (DistServe goodput)."""
    from kvbench.plan.goodput import goodput_command

    raise typer.Exit(
        goodput_command(
            trace=trace,
            workload=workload,
            target=target,
            overrides=set_,
            slo=slo,
            attainment=attainment,
            precision=precision,
            max_requests=max_requests,
            start_rate=start_rate,
            arrivals=arrivals,
            gpus=gpus,
            out=out,
            seed=seed,
        )
    )


def timeline(
    run: Path = typer.Argument(..., help="Run directory."),
    out: Path = typer.Option(Path("trace.json"), "--out", "-o", help="Output Chrome-trace JSON (open in Perfetto)."),
    max_requests: int = typer.Option(
        20_000,
        "--max-requests",
        "-n",
        help="Export at most N requests (the earliest arrivals), to bound the file size.",
    ),
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
    app.command()(report)
    app.command()(goodput)
    app.command()(timeline)
