"""`kvbench plan SPEC --out DIR`: the command-line signature, its progress bar and its ranked table (the planner,
kvbench.plan.halving, is imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, TARGET
from kvbench.cli.sweep import Quiet, Ray

if TYPE_CHECKING:
    from kvbench.plan.halving import PlanResult
    from kvbench.plan.planspec import PlanSpec
    from kvbench.plan.progress import Counts

Spec = Annotated[
    Path, typer.Argument(help="Plan spec (TOML): workload, model, GPU budget, SLOs, deployment space, halving.")
]
Out = Annotated[
    Path,
    typer.Option(
        "--out",
        "-o",
        help="Plan directory: candidates/, rungs/ (one goodput search each), plan.parquet, rungs.parquet, "
        "best.toml. Rerunning reuses finished searches.",
        rich_help_panel=OUTPUT,
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-j",
        help="Processes running candidates' goodput searches at once.",
        show_default="the machine's cores",
        rich_help_panel=TARGET,
    ),
]


def plan(spec: Spec, out: Out, workers: Workers = None, ray: Ray = None, quiet: Quiet = False) -> None:
    """Search deployments (colocated or xPyD, TP, GPU types, router, prefix-cache tiers) for the highest goodput
    per GPU on a trace under SLOs: prune what cannot fit or meet the SLOs, then successive halving (every candidate's
    goodput on a short prefix, the best share on longer ones, the final few on the longest). Writes the ranking,
    the Pareto fronts and the chosen deployment as DIR/best.toml, which --target takes."""
    from kvbench.config import ConfigError
    from kvbench.plan.halving import run_plan
    from kvbench.plan.planspec import load_plan

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    p = load_plan(spec)
    result = run_plan(p, out, workers, ray) if quiet else _with_bar(p, out, workers, ray)
    if not quiet:
        _print(result, out)
    raise typer.Exit(0 if result.best is not None else 1)


def _with_bar(p: PlanSpec, out: Path, workers: int | None, ray: str | None) -> PlanResult:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kvbench.plan.halving import run_plan

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        tasks: dict[str, Any] = {}

        def show(label: str, c: Counts) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=c.total, state="")
            state = f"searched {c.done} (reused {c.skipped}), running {c.running}, left {c.left}, failed {c.failed}"
            bar.update(tasks[label], completed=c.done + c.failed, state=state)

        return run_plan(p, out, workers, ray, show)


def _print(result: PlanResult, out: Path, top: int = 15) -> None:
    """The ranking's top rows (which fronts each is on), the pruned count and the chosen deployment."""
    from rich.console import Console
    from rich.table import Table

    from kvbench.present import fmt
    from kvbench.present.planreport import FIGURES, PRICED

    priced = any("dollars_per_hour" in r for r in result.rows)
    by = "goodput per $/h" if priced else "goodput/GPU"
    t = Table(
        title=f"plan → {out}/plan.parquet (front: on the Pareto front of {by} vs TTFT p90, vs per-user tokens/s)",
        title_justify="left",
    )
    t.add_column("#", justify="right")
    t.add_column("deployment", no_wrap=True)
    columns = {"rung": "rung"} | (PRICED if priced else {}) | FIGURES  # the report's headings
    for title in columns.values():
        t.add_column(title, justify="right")
    t.add_column("front", no_wrap=True)
    ranked = [r for r in result.rows if "rank" in r]
    for r in ranked[:top]:
        rung = {"rung": str(r["rung"] + 1)}
        cells = [rung.get(c) or fmt.number(r.get(c)) for c in columns]
        front = "/".join(k for k, on in (("ttft", r.get("pareto_ttft")), ("user", r.get("pareto_user"))) if on)
        t.add_row(str(r["rank"]), r["candidate"], *cells, front)
    console = Console(width=max(170, Console().width))
    console.print(t)
    err = Console(stderr=True)
    pruned = [r for r in result.rows if r.get("status") == "pruned"]
    failed = [r for r in ranked if r.get("status") != "complete"]
    for r in failed:
        err.print(f"{r['candidate']}: {r.get('error') or r['status']}", highlight=False, markup=False, soft_wrap=True)
    w = result.work
    if w.get("exhaustive_full_simulations") is not None:
        err.print(
            f"{len(ranked)} candidates searched ({len(pruned)} pruned): {w['probes']} probe runs, "
            f"{w['full_simulations']:.1f} full-length simulations (exhaustive search: "
            f"~{w['exhaustive_full_simulations']:.0f})",
            highlight=False,
        )
    if result.best is not None:
        console.print(f"chosen: {result.best['candidate']} → {out}/best.toml (use: --target {out}/best.toml)")
    else:
        err.print("no candidate met the SLOs at any probed rate")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=Command)(plan)
