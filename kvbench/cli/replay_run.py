"""What `kvbench replay` does: select and shape the workload, resolve the target, run with a progress bar, print
counts and the summary."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kvbench.replayer import ReplayStats
from kvbench.run import RunOptions, execute, load_run
from kvbench.rundir import check_out
from kvbench.targets import resolve
from kvbench.units import ns_to_s
from kvbench.workload import load


def _describe(st: ReplayStats) -> str:
    return (
        f"done {st.ended:,}  in flight {st.in_flight:,}  failed {st.errors + st.rejected + st.cancelled:,}"
        f"  t={ns_to_s(st.last_t_ns):,.1f}s"
    )


def replay_command(
    *,
    trace: Path | None,
    workload: str | None,
    target: str,
    overrides: list[str],
    out: Path | None,
    overwrite: bool,
    seed: int,
    time_scale: float,
    rate: float | None,
    start: float,
    duration: float | None,
    max_requests: int | None,
    concurrency: int | None,
    workers: int,
    quiet: bool,
) -> int:
    if out is not None:
        check_out(out, overwrite)  # before reading the trace: a taken --out is known at once
    wl = load.select(trace, workload, seed)
    if rate is not None:
        wl = load.retime_poisson(wl, rate, seed)
    wl = load.shape(wl, time_scale, start, duration, max_requests)
    load.require_requests(wl)
    spec = resolve(target, overrides)
    opts = RunOptions(seed, concurrency, out, workers, overwrite)
    if quiet or workers != 1:  # worker processes report their counts at the end only
        run_dir, stats = execute(wl, spec, opts)
    else:
        run_dir, stats = _execute_with_progress(wl, spec, opts)
    errors = load_run(run_dir).get("worker_errors")
    if errors and not quiet:
        print("kvbench: " + "; ".join(errors), file=sys.stderr)
    if not quiet:
        _print_result(run_dir, stats)
    if stats.status == "complete" and stats.submitted and not stats.finished:  # it measured nothing: a failure
        print(f"kvbench: error: {_none_finished(run_dir, stats)}", file=sys.stderr)
        return 1
    return {"complete": 0, "interrupted": 130}.get(stats.status, 1)


def _none_finished(run_dir: Path, st: ReplayStats) -> str:
    """One line: no request finished, the most common failure class and one of its details."""
    import duckdb

    from kvbench.eventlog import table_parts

    top = (
        duckdb.connect()
        .execute(
            "SELECT count(*) AS n, min(detail) FROM read_parquet(?) WHERE kind IN ('ERROR', 'REJECT', 'CANCEL') "
            "GROUP BY split_part(detail, ':', 1) ORDER BY n DESC, min(detail) LIMIT 1",
            [table_parts(run_dir)],
        )
        .fetchone()
    )
    example = f"; {top[0]:,} like: {top[1]}" if top else ""
    return f"none of {st.submitted:,} requests finished ({st.errors:,} errors, {st.rejected:,} rejected){example}"


def _execute_with_progress(wl, spec, opts):
    console = Console(stderr=True)
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"replay {wl.name} → {spec.name}", state="starting")

        def show(st: ReplayStats) -> None:
            progress.update(task, state=_describe(st))

        return execute(wl, spec, opts, progress=show)


def _print_result(run_dir: Path, st: ReplayStats) -> None:
    console = Console(stderr=True)
    console.print(
        f"[bold]{st.status}[/]: {st.submitted:,} requests, {st.finished:,} finished, {st.errors:,} errors, "
        f"{st.rejected:,} rejected, {st.cancelled:,} cancelled; {st.events:,} events → {run_dir}"
    )
    try:
        from kvbench.present.summary import print_run_summary
    except ImportError:
        return
    print_run_summary(run_dir, file=sys.stdout)
