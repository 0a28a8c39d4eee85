"""One replay run end to end: run directory, run.json manifest, event log, target, replayer, progress."""

from __future__ import annotations

import gc
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kvbench import __version__
from kvbench.eventlog import SCHEMA_VERSION, EventLog, read_manifest, write_manifest
from kvbench.replay import Replayer, ReplayStats
from kvbench.target import REALTIME_KINDS, RunContext, TargetSpec, build
from kvbench.workload.load import Workload


@dataclass(frozen=True)
class RunOptions:
    seed: int = 0
    concurrency: int | None = None
    out: Path | None = None  # run directory; default reports/<run_id>/


def run_id_for(workload: Workload, spec: TargetSpec) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{workload.name}-{spec.name}")[:60]
    return f"{stamp}-{safe}-{os.getpid() % 10000:04d}"


def manifest_for(workload: Workload, spec: TargetSpec, opts: RunOptions, run_id: str) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "kvbench_version": __version__,
        "run_id": run_id,
        "command": sys.argv,
        "status": "running",
        "started_at": datetime.now(UTC).isoformat(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "seed": opts.seed,
        "concurrency": opts.concurrency,
        "workload": {
            "name": workload.name,
            "source": workload.source,
            "digest": workload.digest,
            "slo_ms": workload.slo_ms,
            "shaping": workload.shaping,
        },
        "target": {
            "kind": spec.kind,
            "name": spec.name,
            "source": spec.source,
            "digest": spec.digest(),
            "params": _redacted(spec.params),
        },
    }


_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "authorization", "auth", "bearer", "cookie"})


def _is_secret(key: str) -> bool:
    """api_key, x-api-key, Authorization, auth_token: yes; api_key_env, max_tokens, tokenize_path: no."""
    words = re.split(r"[^a-z0-9]+", key.lower())
    return words[-1] != "env" and any(w in _SECRET_WORDS for w in words)


def _redacted(params: dict) -> dict:
    """Never write secrets: replace values of keys that name credentials."""
    return {k: _redacted(v) if isinstance(v, dict) else "<redacted>" if _is_secret(k) else v for k, v in params.items()}


def execute(
    workload: Workload, spec: TargetSpec, opts: RunOptions, progress: Callable[[ReplayStats], None] | None = None
) -> tuple[Path, ReplayStats]:
    """Replay `workload` against the target `spec`; returns the run directory and the final counts."""
    if spec.kind in REALTIME_KINDS:  # imports and endpoint probes happen before t0, so they are not client lag
        from kvbench.http.probe import prepared_spec

        spec = prepared_spec(spec)
    run_id = run_id_for(workload, spec)
    run_dir = Path(opts.out) if opts.out else Path("reports") / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = manifest_for(workload, spec, opts, run_id)
    write_manifest(run_dir, manifest)
    log = EventLog(run_dir, realtime=spec.kind in REALTIME_KINDS)
    if spec.kind in REALTIME_KINDS:  # the full GC pass due after loading pyarrow/pandas (~50 ms) lands here,
        gc.collect()  # not on the first requests; frozen objects are never rescanned
        gc.freeze()
    t0 = time.monotonic_ns()
    stats = ReplayStats(status="failed")
    try:
        target = build(spec, RunContext(opts.seed, run_dir, log, t0))
        replayer = Replayer(target, log, opts.concurrency, progress=progress)
        stats = replayer.stats  # what was measured, even if run() raises
        stats = replayer.run(workload.requests())
    finally:
        log.close()
        manifest.update(
            status=stats.status,
            finished_at=datetime.now(UTC).isoformat(),
            wall_s=round((time.monotonic_ns() - t0) / 1e9, 3),
            counts=_counts(stats),
        )
        if spec.kind in REALTIME_KINDS:  # real clients can fall behind the schedule: check and flag it
            from kvbench.http.lag import client_lag

            manifest.update(client_lag(stats.send_lags_ns, spec.params))
        write_manifest(run_dir, manifest)
    return run_dir, stats


def _counts(st: ReplayStats) -> dict:
    return {
        "submitted": st.submitted,
        "finished": st.finished,
        "errors": st.errors,
        "rejected": st.rejected,
        "cancelled": st.cancelled,
        "events": st.events,
        "last_t_ns": st.last_t_ns,
    }


def load_run(run_dir: str | Path) -> dict:
    """run.json of a finished or killed run; a run still marked 'running' was killed (SIGKILL, crash)."""
    m = read_manifest(run_dir)
    if m.get("status") == "running":
        m["status"] = "killed"
    return m
