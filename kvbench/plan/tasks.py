"""Where sweep points and plan searches run: one at a time in this process, on a local process pool (from a fork
server, so the driver's threads are not forked), or as Ray tasks (tasks_ray.py). Rows come in the order tasks end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kvbench.plan.progress import Counts, Progress

J = TypeVar("J")
Task = Callable[[Any, Path], dict[str, Any]]  # runs a job into a directory, returns its row
# what the fork server imports once for all workers: the point and search runners and what they use
PRELOAD = ["kvbench.plan.points", "kvbench.plan.rung", "kvbench.run", "kvbench.analysis.figures"]


def run_tasks(
    task: Task, jobs: list[J], dest: Callable[[J], Path], workers: int, ray: str | None, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    """Each job's row, running `task(job, dest(job))` as Ray tasks (`ray`: 'auto' or an address), on a pool of
    `workers` processes, or in this process when workers == 1."""
    if not jobs:
        return iter(())
    if ray is not None:
        from kvbench.plan.tasks_ray import run_on_ray

        return run_on_ray(task, jobs, dest, ray, counts, show)
    if workers <= 1:
        return one_by_one(task, jobs, dest, counts, show)
    return local_pool(task, jobs, dest, workers, counts, show)


def one_by_one(
    task: Task, jobs: list[J], dest: Callable[[J], Path], counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
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


def local_pool(
    task: Task, jobs: list[J], dest: Callable[[J], Path], workers: int, counts: Counts, show: Progress
) -> Iterator[dict[str, Any]]:
    """The jobs on `workers` processes from a fork server, which imports kvbench's runners once for all."""
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
