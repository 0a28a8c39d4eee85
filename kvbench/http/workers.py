"""`--workers N`: shard a real-endpoint replay by session over N forked processes that share one start instant.

Each worker replays the requests whose session (or, outside sessions, req_id) is k mod N, with its own event
loop, HTTP connector and Parquet part files (`w00k-*.parquet`); CLOCK_MONOTONIC is system-wide, so one t0 puts
every worker's t_ns on the same axis. The parent probes the endpoint once (model, calibration), forks, and
writes the single run.json. Fork (not spawn) lets each worker rebuild the workload stream from the same
`Workload` object, whatever its source and shaping, without a picklable description of it.
"""

from __future__ import annotations

import gc
import multiprocessing
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.eventlog import EventLog, write_manifest
from kvbench.http.probe import prepared_spec
from kvbench.records import Request
from kvbench.replay import Replayer, ReplayStats
from kvbench.run import RunOptions, _counts, manifest_for, run_id_for
from kvbench.target import REALTIME_KINDS, RunContext, TargetSpec, build
from kvbench.units import NS_PER_MS
from kvbench.workload.load import Workload

START_MARGIN_NS = 200 * NS_PER_MS  # t0 is this far after the fork, so every worker is ready for t = 0
_STATUS_RANK = {"complete": 0, "interrupted": 1, "failed": 2}


def shard(requests: Iterator[Request], k: int, n: int, replayer: Replayer) -> Iterator[Request]:
    """Requests of shard k of n. Skipped requests still feed the replayer's seen-block set, so the trace-implied
    reuse recorded per request is the same as in a single-process run."""
    for r in requests:
        if (r.session_id if r.session_id >= 0 else r.req_id) % n == k:
            yield r
        else:
            replayer.seen.add(r.hash_ids)


def _share(concurrency: int | None, k: int, n: int) -> int | None:
    return None if concurrency is None else concurrency // n + (1 if k < concurrency % n else 0)


def _worker(
    workload: Workload, spec: TargetSpec, opts: RunOptions, run_dir: Path, k: int, n: int, t0_ns: int, conn
) -> None:
    log = EventLog(run_dir, realtime=True, worker=k)
    gc.collect()  # before t0 (see kvbench/run.py): no full GC pass on the first requests
    gc.freeze()
    stats, error = ReplayStats(status="failed"), None
    try:
        target = build(spec, RunContext(opts.seed, run_dir, log, t0_ns, worker=k, workers=n))
        replayer = Replayer(target, log, _share(opts.concurrency, k, n))
        stats = replayer.run(shard(workload.requests(), k, n, replayer))
    except KeyboardInterrupt:
        stats.status = "interrupted"
    except Exception as e:
        error = f"worker {k}: {type(e).__name__}: {e}"
    finally:
        log.close()
        conn.send((asdict(stats), error))
        conn.close()


def _collect(conns: list, procs: list) -> tuple[ReplayStats, list[str]]:
    total, errors, worst = ReplayStats(status="complete"), [], "complete"
    for k, (conn, proc) in enumerate(zip(conns, procs)):
        try:
            st, err = _recv(conn)
        except (EOFError, OSError):
            st, err = asdict(ReplayStats(status="failed")), f"worker {k} died (exit code {proc.exitcode})"
        for key in ("submitted", "finished", "errors", "rejected", "cancelled", "events"):
            setattr(total, key, getattr(total, key) + st[key])
        total.last_t_ns = max(total.last_t_ns, st["last_t_ns"])
        total.send_lags_ns.extend(st["send_lags_ns"])
        worst = max(worst, st["status"], key=lambda s: _STATUS_RANK.get(s, 2))
        if err:
            errors.append(err)
        proc.join()
    total.status = worst
    return total, errors


def execute_sharded(
    workload: Workload, spec: TargetSpec, opts: RunOptions, workers: int, quiet: bool = False
) -> tuple[Path, ReplayStats]:
    """Replay over `workers` processes; returns the run directory and the summed counts."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if spec.kind not in REALTIME_KINDS:
        raise ConfigError(f"--workers shards real-endpoint runs; target {spec.name!r} is {spec.kind!r}")
    if opts.concurrency is not None and opts.concurrency < workers:
        raise ConfigError(f"--concurrency {opts.concurrency} must be >= --workers {workers}")
    wspec = prepared_spec(spec)
    run_id = run_id_for(workload, spec)
    run_dir = Path(opts.out) if opts.out else Path("reports") / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {**manifest_for(workload, wspec, opts, run_id), "workers": workers}
    write_manifest(run_dir, manifest)
    mp = multiprocessing.get_context("fork")
    t0 = time.monotonic_ns() + START_MARGIN_NS
    conns, procs = [], []
    for k in range(workers):
        recv, send = mp.Pipe(duplex=False)
        proc = mp.Process(target=_worker, args=(workload, wspec, opts, run_dir, k, workers, t0, send))
        proc.start()
        send.close()
        conns.append(recv)
        procs.append(proc)
    stats, errors = _collect(conns, procs)
    from kvbench.http.lag import client_lag

    manifest.update(
        status=stats.status,
        finished_at=datetime.now(UTC).isoformat(),
        wall_s=round((time.monotonic_ns() - t0) / 1e9, 3),
        counts=_counts(stats),
        worker_errors=errors,
        **client_lag(stats.send_lags_ns, spec.params),
    )
    write_manifest(run_dir, manifest)
    if errors and not quiet:
        print("kvbench: " + "; ".join(errors), file=sys.stderr)
    return run_dir, stats


def _recv(conn) -> tuple[dict, str | None]:
    """Ctrl-C reaches the workers too (same process group); they cancel and report, so keep waiting."""
    while True:
        try:
            return conn.recv()
        except KeyboardInterrupt:
            continue
