"""Where a plan's searches run: one at a time, on a local process pool (from a fork server, so the driver's threads
are not forked), or as Ray tasks that run in a scratch directory and send their files back through the object
store, so the driver's directory is complete whatever node ran them. Results come in the order tasks end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kvbench.plan.progress import Counts, Progress

J = TypeVar("J")
Task = Callable[[J, Path], dict[str, Any]]  # runs a job into a directory, returns its row
PRELOAD = ["kvbench.plan.rung", "kvbench.run", "kvbench.analysis.figures"]


def run_tasks(
    task: Task, jobs: list[J], dest: Callable[[J], Path], workers: int, ray: str | None, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    """Each job's row, running `task(job, dest(job))` on Ray (`ray`: 'auto' or an address), a pool of `workers`
    processes, or in this process when workers == 1."""
    if not jobs:
        return iter(())
    if ray is not None:
        return _on_ray(task, jobs, dest, ray, counts, show)
    if workers <= 1:
        return _one_by_one(task, jobs, dest, counts, show)
    return _local_pool(task, jobs, dest, workers, counts, show)


def _one_by_one(task: Task, jobs: list[J], dest: Callable[[J], Path], counts: Counts, show: Progress) -> Iterator:
    for job in jobs:
        counts.running = 1
        show(counts)
        row = task(job, dest(job))
        counts.running = 0
        yield row
        if row.get("status") == "interrupted":
            raise KeyboardInterrupt


def _call(task: Task, job: Any, dest: str) -> dict[str, Any]:
    return task(job, Path(dest))


def _local_pool(
    task: Task, jobs: list[J], dest: Callable[[J], Path], workers: int, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        pending = {pool.submit(_call, task, job, str(dest(job))) for job in jobs}
        try:
            while pending:
                counts.running = min(workers, len(pending))
                show(counts)
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                counts.running = min(workers, len(pending))
                for f in done:
                    yield f.result()
        except KeyboardInterrupt:
            for f in pending:
                f.cancel()
            raise
        finally:
            counts.running = 0


def in_scratch(task: Task, job: Any, name: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run `task` into a scratch directory; its row and every file it wrote (the scratch is removed)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kvbench-task-") as tmp:
        out = Path(tmp) / name
        row = task(job, out)
        files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return row, files


def _on_ray(
    task: Task, jobs: list[J], dest: Callable[[J], Path], address: str, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    """One Ray task per job (one CPU each)."""
    import ray as ray_

    from kvbench.plan.sweep_ray import connect, write_files

    leave = connect(address)
    try:
        remote = ray_.remote(num_cpus=1, max_retries=0)(in_scratch)
        job_of = {remote.remote(task, job, dest(job).name): job for job in jobs}
        slots = max(1, int(ray_.cluster_resources().get("CPU", 1)))
        pending = list(job_of)
        try:
            while pending:
                counts.running = min(slots, len(pending))
                show(counts)
                ready, pending = ray_.wait(pending, num_returns=1)
                row, files = ray_.get(ready[0])
                write_files(dest(job_of[ready[0]]), files)
                counts.running = min(slots, len(pending))
                yield row
        except KeyboardInterrupt:
            for ref in pending:
                ray_.cancel(ref, force=True)
            raise
    finally:
        counts.running = 0
        leave()
