"""Joining a Ray cluster (the extra kvbench[ray]) and moving a directory's files through its object store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvbench.config import ConfigError

Files = dict[str, bytes]  # path relative to a directory -> content


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


def files_of(directory: Path, skip: str = "") -> Files:
    """Every file under `directory` (but those under its folder `skip`), by path relative to it."""
    files = (p for p in sorted(directory.rglob("*")) if p.is_file())
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in files
        if not (skip and p.is_relative_to(directory / skip))
    }


def put_files(directory: Path, files: Files) -> None:
    """Write `files` under `directory` (on the driver), creating folders as needed."""
    for rel, blob in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
