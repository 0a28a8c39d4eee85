"""Sweep points and plan searches as Ray tasks (the extra kvbench[ray]): each task runs in a scratch directory on
whichever node it lands on and returns its row and every file it wrote through Ray's object store; the driver
writes them into its own directory, so that is complete on the driver's machine whatever node ran the task."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kvbench.analysis.cache import CACHE_DIR
from kvbench.raycluster import Files, connect, files_of, put_files

if TYPE_CHECKING:
    from kvbench.plan.progress import Counts

J = TypeVar("J")
Task = Callable[[Any, Path], dict[str, Any]]  # runs a job into a directory, returns its row


def in_scratch(task: Task, job: Any, name: str) -> tuple[dict[str, Any], Files]:
    """Run `task` into a scratch directory; its row and every file it wrote (the scratch is removed) but a summary
    cache, whose key names the scratch files' times and would not match on the driver anyway."""
    with tempfile.TemporaryDirectory(prefix="kvbench-task-") as tmp:
        out = Path(tmp) / name
        row = task(job, out)
        files = files_of(out, skip=CACHE_DIR)
    return row, files


def write_files(out: Path, files: Files) -> None:
    """A task's files under its directory on the driver, replacing what an earlier attempt left."""
    if out.exists():
        shutil.rmtree(out)
    put_files(out, files)


def run_on_ray(
    task: Task, jobs: list[J], dest: Callable[[J], Path], address: str, counts: Counts, show: Callable[[Counts], None]
) -> Iterator[dict[str, Any]]:
    """One Ray task per job (one CPU each); rows in the order the tasks end."""
    import ray

    leave = connect(address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(in_scratch)
        job_of = {remote.remote(task, job, dest(job).name): job for job in jobs}
        slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = list(job_of)
        try:
            while pending:
                counts.running = min(slots, len(pending))
                show(counts)
                ready, pending = ray.wait(pending, num_returns=1)
                row, files = ray.get(ready[0])
                write_files(dest(job_of[ready[0]]), files)
                counts.running = min(slots, len(pending))
                yield row
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        counts.running = 0
        leave()
