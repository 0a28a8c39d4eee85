"""Running a sweep into DIR: one run directory per point under DIR/points/, finished points skipped on a rerun,
the rest run one at a time (real endpoints: the server is the shared resource), on a local process pool
(virtual-time targets) or as Ray tasks (plan/tasks.py); DIR/sweep.parquet gathers one row per point."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError
from kvbench.plan.points import check_job, finished, finished_row, point_target, run_point
from kvbench.plan.progress import Counts, Progress
from kvbench.plan.sweepspec import PointJob, Sweep

POINTS = "points"
MANIFEST = "sweep.json"
TABLE = "sweep.parquet"


def prepare(sweep: Sweep, out: Path) -> None:
    """Check every point, then make DIR (a new or empty directory, or an earlier run of a sweep)."""
    for job in sweep.jobs:
        check_job(job)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise ConfigError(f"{out}: exists and is not an empty directory or an earlier sweep's (no {MANIFEST})")
    (out / POINTS).mkdir(parents=True, exist_ok=True)
    doc = {"name": sweep.name, "source": sweep.source, "axes": list(sweep.axes), "points": [j.name for j in sweep.jobs]}
    (out / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")


def realtime(sweep: Sweep) -> bool:
    """Whether any point drives a real endpoint (then points run one at a time)."""
    from kvbench.targets import registration

    return any(registration(point_target(j).kind).realtime for j in sweep.jobs)


def run_sweep(
    sweep: Sweep, out: Path, workers: int | None = None, ray: str | None = None, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """Run the points not finished yet and write DIR/sweep.parquet (also when interrupted: the rows so far).
    Returns the rows in the spec's order."""
    prepare(sweep, out)
    rows: dict[str, dict[str, Any]] = {}
    todo: list[PointJob] = []
    for job in sweep.jobs:
        run_dir = out / POINTS / job.name
        if finished(job, run_dir):
            rows[job.name] = finished_row(job, run_dir)
        else:
            if run_dir.exists():  # an unfinished run of this point (killed, failed): start it afresh
                shutil.rmtree(run_dir)
            todo.append(job)
    counts = Counts(len(sweep.jobs), done=len(rows), skipped=len(rows))
    show = progress or (lambda c: None)
    show(counts)
    try:
        for row in _backend(sweep, todo, out, workers, ray, counts, show):
            rows[row["point"]] = row
            counts.done += row["status"] == "complete"
            counts.failed += row["status"] != "complete"
            show(counts)
    finally:
        write_table(out, sweep, [rows[j.name] for j in sweep.jobs if j.name in rows])
    return [rows[j.name] for j in sweep.jobs if j.name in rows]


def _backend(
    sweep: Sweep, todo: list[PointJob], out: Path, workers: int | None, ray: str | None, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    from kvbench.plan.tasks import run_tasks

    n = 1 if ray is None and realtime(sweep) else workers or os.cpu_count() or 1
    return run_tasks(run_point, todo, lambda job: out / POINTS / job.name, n, ray, counts, show)


def write_table(out: Path, sweep: Sweep, rows: list[dict[str, Any]]) -> Path:
    """DIR/sweep.parquet: one row per point, in the spec's order: point, status, the parameters, the summary
    figures (summary.json keys), nominal_rate, nominal_source, rate_gap, gpus, wall_s, slo, run_dir, error."""
    import pandas as pd

    df = pd.DataFrame(rows)
    for col in df.columns:  # a parameter may take values of several types (1 and "a"): Parquet needs one
        kinds = {type(v) for v in df[col] if v is not None and v == v}
        if len(kinds) > 1 and not kinds <= {int, float}:
            df[col] = df[col].map(lambda v: None if v is None else str(v))
    path = out / TABLE
    tmp = path.with_suffix(".parquet.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path
