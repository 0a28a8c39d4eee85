"""Command-line signatures of the metrics commands: summary, sql, compare, gate (machinery imported lazily)."""

from __future__ import annotations

from pathlib import Path

import typer

SLO_HELP = "SLO thresholds in ms, vLLM keys plus Mooncake's tbt: e.g. ttft=200,tpot=50,e2el=5000,tbt=100"


def summary_cmd(
    run: Path = typer.Argument(..., help="Run directory (holds run.json and events/)."),
    slo: str | None = typer.Option(None, "--slo", help=SLO_HELP + " (default: the workload's SLOs in run.json)."),
    json_out: bool = typer.Option(False, "--json", help="Print summary.json to stdout instead of tables."),
    bucket: float = typer.Option(1.0, "--bucket", help="Time bucket of the time series in summary.json, in seconds."),
) -> None:
    """Compute a run's figures, write RUN/summary.json and print them."""
    from kvbench.analysis.metrics import parse_slo
    from kvbench.present import summary

    doc = summary.build(run, parse_slo(slo) if slo else None, bucket)
    path = summary.write(doc, run)
    if json_out:
        import sys

        sys.stdout.buffer.write(path.read_bytes())
        sys.stdout.flush()
    else:
        summary.print_summary(doc)


def sql_cmd(
    args: list[str] = typer.Argument(
        ...,
        help="RUN... then the query: run directories (globs allowed) and last "
        "a DuckDB SELECT over the views events, requests, steps, "
        "server_metrics, per_request (each has a `run` column).",
    ),
    csv: bool = typer.Option(False, "--csv", help="Print CSV instead of a table."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON records instead of a table."),
    slo: str | None = typer.Option(None, "--slo", help="SLOs for per_request.good: " + SLO_HELP + "."),
    limit: int = typer.Option(100, "--limit", help="Rows shown in the table (CSV/JSON print all)."),
) -> None:
    """Run a DuckDB query over one or several runs."""
    from kvbench.analysis.sqlquery import run_query

    if len(args) < 2:
        from kvbench.config import ConfigError

        raise ConfigError(
            'kvbench sql: give RUN... and a query, e.g. kvbench sql reports/r1 "SELECT count(*) FROM events"'
        )
    run_query(args[:-1], args[-1], "csv" if csv else "json" if json_out else "table", slo, limit)


def compare_cmd(
    base: Path = typer.Argument(..., help="Baseline run directory or its summary.json."),
    cand: Path = typer.Argument(..., help="Candidate run directory or its summary.json."),
    slo: str | None = typer.Option(
        None, "--slo", help=SLO_HELP + ", for sides given as run directories (default: each run's workload SLOs)."
    ),
    resamples: int = typer.Option(1000, "--resamples", help="Bootstrap resamples for the confidence intervals."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    all_metrics: bool = typer.Option(False, "--all", help="Show every metric, not only the headline ones."),
) -> None:
    """Per-metric deltas (candidate - baseline) with seeded bootstrap 95 % confidence intervals."""
    from kvbench.present import compare

    compare.compare_command(base, cand, slo, resamples, json_out, all_metrics)


def gate_cmd(
    baseline: Path | None = typer.Option(
        None, "--baseline", help="Baseline run directory or summary.json (omit to check absolute limits only)."
    ),
    candidate: Path = typer.Option(..., "--candidate", help="Candidate run directory or summary.json."),
    rules: Path = typer.Option(Path("reports/gates.toml"), "--rules", help="Gate rules (TOML)."),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per rule)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write a Markdown table here (CI job summary)."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help=SLO_HELP + ", for sides given as run directories (default: the SLOs the baseline was summarised with).",
    ),
) -> None:
    """Check a candidate against a baseline and/or limits; exit 0 pass, 1 regression, 2 bad input."""
    from kvbench.present import gate_run

    raise typer.Exit(gate_run.gate_command(baseline, candidate, rules, junit, markdown, slo))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command("summary")(summary_cmd)
    app.command("sql")(sql_cmd)
    app.command("compare")(compare_cmd)
    app.command("gate")(gate_cmd)
