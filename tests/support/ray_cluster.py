"""A real local Ray cluster for tests and benchmarks: on 127.0.0.1, without the dashboard, `num_cpus` CPUs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2) -> Iterator[str]:
    """Start the cluster in this process (about 10 s); yields its address, which other processes can join."""
    # On Linux Ray binds its processes to the host's network address; with this (read when ray is imported, and
    # inherited by the processes ray.init starts) it keeps the whole cluster on 127.0.0.1.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")  # the extra kvbench[ray]; the test extra installs it, so CI runs this
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
