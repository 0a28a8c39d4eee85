"""Command-line signatures of the metrics commands: summary, sql, compare, gate (machinery imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, SLO_HELP

RunDir = Annotated[Path, typer.Argument(help="Run directory (holds run.json and events/).")]
SIDE = "run directory or its summary.json"


def summary_cmd(
    run: RunDir,
    slo: Annotated[
        str | None, typer.Option("--slo", help=SLO_HELP + ".", show_default="the workload's SLOs in run.json")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print summary.json to stdout instead of tables.", rich_help_panel=OUTPUT)
    ] = False,
    bucket: Annotated[
        float, typer.Option("--bucket", help="Time bucket of the time series in summary.json, in seconds.")
    ] = 1.0,
) -> None:
    """Compute a run's figures, write RUN/summary.json and print them."""
    from kvbench.analysis.metrics import parse_slo
    from kvbench.present import summary

    doc = summary.build(run, parse_slo(slo) if slo else None, bucket)
    summary.save(doc, run)  # on a full disk: a warning, and the figures are still printed
    if json_out:
        import sys

        sys.stdout.buffer.write(summary.dumps(doc))
        sys.stdout.flush()
    else:
        summary.print_summary(doc)


def sql_cmd(
    args: Annotated[
        list[str],
        typer.Argument(
            help="RUN... then the query: run directories (globs allowed) and last "
            "a DuckDB SELECT over the views events, requests, steps, "
            "server_metrics, per_request (each has a `run` column).",
        ),
    ],
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.", rich_help_panel=OUTPUT)] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON records instead of a table.", rich_help_panel=OUTPUT)
    ] = False,
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs for per_request.good: " + SLO_HELP + ".")] = None,
    limit: Annotated[
        int, typer.Option("--limit", help="Rows shown in the table (CSV/JSON print all).", rich_help_panel=OUTPUT)
    ] = 100,
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
    base: Annotated[Path, typer.Argument(help=f"Baseline {SIDE}.")],
    cand: Annotated[Path, typer.Argument(help=f"Candidate {SIDE}.")],
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo", help=SLO_HELP + ", for sides given as run directories.", show_default="each run's workload SLOs"
        ),
    ] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", help="Bootstrap resamples for the confidence intervals.")
    ] = 1000,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON.", rich_help_panel=OUTPUT)
    ] = False,
    all_metrics: Annotated[
        bool, typer.Option("--all", help="Show every metric, not only the headline ones.", rich_help_panel=OUTPUT)
    ] = False,
) -> None:
    """Per-metric deltas (candidate - baseline) with seeded bootstrap 95 % confidence intervals."""
    from kvbench.present import compare

    compare.compare_command(base, cand, slo, resamples, json_out, all_metrics)


def gate_cmd(
    *,
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help=f"Baseline {SIDE} (omit to check absolute limits only).")
    ] = None,
    candidate: Annotated[Path, typer.Option("--candidate", help=f"Candidate {SIDE}.")],
    rules: Annotated[Path, typer.Option("--rules", help="Gate rules (TOML).")] = Path("reports/gates.toml"),
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Write JUnit XML here (one testcase per rule).", rich_help_panel=OUTPUT),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Write a Markdown table here (CI job summary).", rich_help_panel=OUTPUT),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help=SLO_HELP + ", for sides given as run directories.",
            show_default="the SLOs the baseline was summarised with",
        ),
    ] = None,
) -> None:
    """Check a candidate against a baseline and/or limits; exit 0 pass, 1 regression, 2 bad input."""
    from kvbench.present import gate_run

    raise typer.Exit(gate_run.gate_command(baseline, candidate, rules, junit, markdown, slo))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command("summary", cls=Command)(summary_cmd)
    app.command("sql", cls=Command)(sql_cmd)
    app.command("compare", cls=Command)(compare_cmd)
    app.command("gate", cls=Command)(gate_cmd)
