"""`kvbench sweep SPEC --out DIR`: the command-line signature and its progress bar (the runner, kvbench.plan.sweep,
is imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, TARGET

if TYPE_CHECKING:
    from kvbench.plan.progress import Counts

Spec = Annotated[Path, typer.Argument(help="Sweep spec (TOML): workload, base target, axes or listed points.")]
Out = Annotated[
    Path,
    typer.Option(
        "--out",
        "-o",
        help="Sweep directory: points/<point>/ (one run each), sweep.parquet. Rerunning skips finished points.",
        rich_help_panel=OUTPUT,
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-j",
        help="Processes running simulated points at once (real endpoints: always one point at a time).",
        show_default="the machine's cores",
        rich_help_panel=TARGET,
    ),
]
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="auto|ADDRESS",
        help="Run each point (plan: each goodput search) as a Ray task: 'auto' (a running cluster, else a local "
        "one) or a cluster address (needs the extra kvbench\\[ray]). Each task sends its runs back, so DIR is complete "
        "on this machine.",
        rich_help_panel=TARGET,
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or table.", rich_help_panel=OUTPUT)]


def sweep(spec: Spec, out: Out, workers: Workers = None, ray: Ray = None, quiet: Quiet = False) -> None:
    """Run every point of a sweep spec (a cross product of axes, or a listed set): one run per point, one row per
    point in DIR/sweep.parquet. Axes: rate (req/s; session workloads scale their session starts), time_scale,
    concurrency, seed, max_requests, target, workload.KEY (a workload spec key) or any --set key of the target."""
    from kvbench.config import ConfigError
    from kvbench.plan.sweep import run_sweep
    from kvbench.plan.sweepspec import load_sweep

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    plan = load_sweep(spec)
    if quiet:
        rows = run_sweep(plan, out, workers, ray)
    else:
        rows = _with_bar(plan, out, workers, ray)
    statuses = [r["status"] for r in rows]
    if not quiet:
        _print_rows(rows, plan.axes, out)
    raise typer.Exit(0 if all(s == "complete" for s in statuses) and len(rows) == len(plan.jobs) else 1)


def _with_bar(plan, out: Path, workers: int | None, ray: str | None) -> list[dict]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from kvbench.plan.sweep import run_sweep

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"sweep {plan.name}", total=len(plan.jobs), state="")

        def show(c: Counts) -> None:
            state = f"done {c.done} (skipped {c.skipped}), running {c.running}, left {c.left}, failed {c.failed}"
            bar.update(task, completed=c.done + c.failed, state=state)

        return run_sweep(plan, out, workers, ray, show)


COLUMNS = {  # sweep.parquet column -> table heading
    "nominal_rate": "nominal req/s",
    "arrival_rate": "achieved req/s",
    "request_throughput": "finished req/s",
    "slo_attainment": "attainment",
    "ttft_ms.p99": "TTFT p99 ms",
    "tpot_ms.p99": "TPOT p99 ms",
}


def _print_rows(rows: list[dict], axes: tuple[str, ...], out: Path) -> None:
    """One line per point: its parameters, status, nominal and achieved rate, throughput, attainment, TTFT p99."""
    from rich.console import Console
    from rich.table import Table

    from kvbench.present import fmt

    t = Table(title=f"sweep → {out}/sweep.parquet", title_justify="left")
    for a in (*axes, "status"):
        t.add_column(a, no_wrap=True)
    for title in COLUMNS.values():
        t.add_column(title, justify="right")
    for r in rows:
        t.add_row(*(str(r.get(a)) for a in axes), r["status"], *(fmt.number(r.get(c)) for c in COLUMNS))
    Console(width=max(120, Console().width)).print(t)
    for r in rows:
        if r.get("error"):
            Console(stderr=True).print(
                f"point {r['point']}: {r['error']}", highlight=False, markup=False, soft_wrap=True
            )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=Command)(sweep)
