"""Sweep points as Ray tasks (the extra kvbench[ray]): each task runs its point in a scratch directory on whichever
node it lands on and returns its row and the run directory's files through Ray's object store; the driver writes
them under DIR/points/, so DIR is complete on the driver's machine whatever node ran the point."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.config import ConfigError
from kvbench.plan.points import run_point
from kvbench.plan.sweepspec import PointJob

if TYPE_CHECKING:
    from kvbench.plan.progress import Counts

Files = dict[str, bytes]  # path relative to the run directory -> content


def point_files(job: PointJob) -> tuple[dict[str, Any], Files]:
    """Run one point in a scratch directory; its row and every file it wrote (the scratch is removed)."""
    with tempfile.TemporaryDirectory(prefix="kvbench-point-") as tmp:
        run_dir = Path(tmp) / job.name
        row = run_point(job, run_dir)
        files = {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}
    return row, files


def write_files(run_dir: Path, files: Files) -> None:
    """A point's files under DIR/points/<point>/, replacing what an earlier attempt left."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    for rel, blob in files.items():
        path = run_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)


def connect(address: str) -> Callable[[], None]:
    """Join the Ray cluster at `address` ('auto': the running one, else a new local one without the dashboard)
    unless this process already has; returns how to leave it again (nothing when it was joined before)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'kvbench[ray]'") from None
    if ray.is_initialized():
        return lambda: None
    try:
        ray.init(address=None if address == "auto" else address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ConfigError(f"--ray {address}: cannot reach a Ray cluster: {str(e).splitlines()[0]}") from None
    return ray.shutdown


def run_on_ray(
    todo: list[PointJob], points: Path, address: str, counts: Counts, show: Callable[[Counts], None]
) -> Iterator[dict[str, Any]]:
    """One Ray task per point (one CPU each); rows in the order the tasks end."""
    import ray

    leave = connect(address)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(point_files)
        job_of = {task.remote(job): job for job in todo}
        slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = list(job_of)
        try:
            while pending:
                counts.running = min(slots, len(pending))
                show(counts)
                ready, pending = ray.wait(pending, num_returns=1)
                row, files = ray.get(ready[0])
                write_files(points / job_of[ready[0]].name, files)
                counts.running = min(slots, len(pending))
                yield row
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        counts.running = 0
        leave()
