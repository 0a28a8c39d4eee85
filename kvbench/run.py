"""The one runner: a replay of a workload against any target, in this process or sharded by session over N
forked worker processes; it owns the run directory, the run.json manifest and the event logs.

Sharding (`workers` > 1): worker k replays the requests whose session (or, outside sessions, req_id) is k mod N,
with its own target, replayer and event-log part files (`w00k-*.parquet`); CLOCK_MONOTONIC is system-wide, so
one t0 puts every worker's t_ns on the same axis. The parent prepares the target once (for an endpoint: probe
the model and calibrate), forks, gathers the workers' counts and client lags, and writes the single run.json.
Fork (not spawn) lets each worker rebuild the workload stream from the same `Workload` object, whatever its
source and shaping, without a picklable description of it. A `Sharder` runs the same worker function (run_shard)
elsewhere: kvbench.run_ray places the workers as Ray actors on other hosts.
"""

from __future__ import annotations

import errno
import gc
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.clientlag import client_lag
from kvbench.config import ConfigError
from kvbench.eventlog import SCHEMA_VERSION, EventLog, read_manifest, write_manifest
from kvbench.gcpolicy import fewer_collections
from kvbench.records import Event, Request
from kvbench.redact import redact_argv, redact_params, redact_text, secret_values
from kvbench.replayer import Replayer, ReplayStats
from kvbench.rundir import check_out, claim, fresh
from kvbench.target import Registration, RunContext, TargetSpec
from kvbench.targets import registration
from kvbench.units import NS_PER_MS, s_to_ns
from kvbench.version import __version__
from kvbench.workload.load import Workload

if TYPE_CHECKING:  # multiprocessing is imported by sharded runs only
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

# A real-time run's t0 is this far ahead (of the fork, when sharded): every worker is ready and its connections
# open at t = 0.
START_MARGIN_NS = 200 * NS_PER_MS
_STATUS_RANK = {"complete": 0, "interrupted": 1, "failed": 2}
_COUNTS = ("submitted", "finished", "errors", "rejected", "cancelled", "events")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# A virtual-time run's cyclic GC runs once per this many net allocations instead of 700 (see _virtual_gc)
VIRTUAL_GC_THRESHOLD = 100_000


@dataclass(frozen=True)
class RunOptions:
    seed: int = 0
    concurrency: int | None = None
    out: Path | None = None  # run directory; default reports/<run_id>/
    workers: int = 1  # > 1: shard the replay by session over this many processes (real-time targets)
    overwrite: bool = False  # replace a run already in `out` (else a non-empty `out` is refused)
    closed: bool = False  # closed loop: `concurrency` users, each sending its next request when its answer ends
    think_s: float = 0.0  # closed loop: a user's pause between an answer and its next request


@dataclass
class Sharded:
    """How a sharded run went: summed counts, the workers' errors, the t0 they released against (on the driver's
    clock) and what this way of running adds to run.json."""

    stats: ReplayStats
    errors: list[str]
    t0_ns: int
    manifest: dict[str, Any] = field(default_factory=dict)


Sharder = Callable[[Workload, TargetSpec, Registration, RunOptions, Path], Sharded]
Shard = tuple[dict[str, Any], str | None]  # a worker's counts (ReplayStats as a dict) and its error, if any


def run_id_for(workload: Workload, spec: TargetSpec) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{workload.name}-{spec.name}")[:60]
    return f"{stamp}-{safe}-{os.getpid() % 10000:04d}"


def manifest_for(workload: Workload, spec: TargetSpec, opts: RunOptions, run_id: str) -> dict:
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kvbench_version": __version__,
        "run_id": run_id,
        "command": redact_argv(sys.argv, secret_values(spec.params)),
        "status": "running",
        "started_at": datetime.now(UTC).isoformat(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "seed": opts.seed,
        "concurrency": opts.concurrency,
        **({"closed_loop": {"users": opts.concurrency, "think_s": opts.think_s}} if opts.closed else {}),
        "workload": {
            "name": workload.name,
            "source": workload.source,
            "digest": workload.digest,
            "slo_ms": workload.slo_ms,
            "shaping": workload.shaping,
            **({"tokens": workload.tokens} if workload.tokens else {}),
        },
        "target": {
            "kind": spec.kind,
            "name": spec.name,
            "source": spec.source,
            "digest": spec.digest(),
            "params": redact_params(spec.params),
        },
    }
    if opts.workers > 1:
        manifest["workers"] = opts.workers
    return manifest


def execute(
    workload: Workload,
    spec: TargetSpec,
    opts: RunOptions,
    progress: Callable[[ReplayStats], None] | None = None,
    watch: Callable[[Event], None] | None = None,
    sharder: Sharder | None = None,
) -> tuple[Path, ReplayStats]:
    """Replay `workload` against the target `spec`; returns the run directory and the final (summed) counts.
    `progress` is called with the counts as the run goes and `watch` with every event (in-process runs only).
    `sharder`: how the worker shards run (default: `opts.workers` forked processes, or this process for one);
    given, it runs them for any number of workers (kvbench.run_ray places them on a Ray cluster).
    However the run ends, run.json says how (complete, interrupted, failed with a one-line `error`); a full disk
    is an OSError naming the run."""
    reg = registration(spec.kind)
    _check_workers(spec, reg, opts)
    if opts.out is not None:
        check_out(Path(opts.out), opts.overwrite)  # refused before the target is probed
    spec = reg.prepare(spec)  # before t0: set-up (probes, imports) is neither run time nor client lag
    run_id = run_id_for(workload, spec)
    run_dir = claim(Path(opts.out), opts.overwrite) if opts.out else fresh(Path("reports") / run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = manifest_for(workload, spec, opts, run_id)
    write_manifest(run_dir, manifest)
    stats, t0 = ReplayStats(status="failed"), time.monotonic_ns()
    errors: list[str] = []
    try:
        if opts.workers == 1 and sharder is None:
            log = _open_log(run_dir, reg, 0, 1)
            t0 = time.monotonic_ns() + (START_MARGIN_NS if reg.realtime else 0)  # a real target warms up first
            ctx = RunContext(opts.seed, run_dir, log, t0)
            _replay(log, workload, spec, reg, opts, ctx, stats, progress, watch)
        else:
            sharded = (sharder or _forked)(workload, spec, reg, opts, run_dir)
            stats, errors, t0 = sharded.stats, sharded.errors, sharded.t0_ns
            manifest.update(sharded.manifest)
    except BaseException as e:
        stats.status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        errors += [] if isinstance(e, KeyboardInterrupt) else [_reason(e, run_dir)]
        told = _told(e, run_dir, spec)
        if told is e:
            raise
        raise told from None
    finally:
        manifest.update(_ending(stats, errors, t0, spec))
        if opts.workers > 1 or sharder is not None:
            manifest["worker_errors"] = errors
        if reg.realtime:  # real clients can fall behind the schedule: check and flag it
            manifest.update(client_lag(stats.send_lags_ns, spec.params, stats.opening_lags_ns if opts.closed else None))
        write_manifest(run_dir, manifest)
    return run_dir, stats


def _ending(stats: ReplayStats, errors: list[str], t0: int, spec: TargetSpec) -> dict[str, Any]:
    """run.json's closing fields: status (never left `running`), times, counts, a failed run's one-line reason."""
    if stats.status not in _STATUS_RANK:
        stats.status = "failed"  # e.g. a replayer that raised before it could say so
    end = {
        "status": stats.status,
        "finished_at": datetime.now(UTC).isoformat(),
        "wall_s": round((time.monotonic_ns() - t0) / 1e9, 3),
        "counts": {key: getattr(stats, key) for key in (*_COUNTS, "last_t_ns")},
    }
    if stats.status == "failed":
        end["error"] = redact_text("; ".join(errors) or "unknown", secret_values(spec.params))
    return end


def _told(e: BaseException, run_dir: Path, spec: TargetSpec) -> BaseException:
    """The exception as the user is told it: a full disk names the run; a one-line error never shows a secret."""
    if isinstance(e, OSError) and e.errno in DISK_FULL:
        return OSError(e.errno, f"{os.strerror(e.errno)} writing the run (run.json says failed)", str(run_dir))
    if isinstance(e, ConfigError) and (clean := redact_text(str(e), secret_values(spec.params))) != str(e):
        return ConfigError(clean)
    return e


def _reason(e: BaseException, run_dir: Path) -> str:
    """One line saying why a run failed."""
    if isinstance(e, OSError) and e.errno in DISK_FULL:
        return f"{os.strerror(e.errno).lower()} writing {run_dir}"
    text = str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:500]


def _check_workers(spec: TargetSpec, reg: Registration, opts: RunOptions) -> None:
    """Sharding suits real-time targets only: N clients of one endpoint measure that endpoint, whereas N copies
    of a virtual-time target would be N separate systems each seeing 1/N of the load."""
    if opts.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {opts.workers}")
    if opts.workers > 1 and not reg.realtime:
        raise ConfigError(
            f"--workers shards real-time targets; target {spec.name!r} ({spec.kind}) runs in virtual time"
        )
    if opts.concurrency is not None and opts.concurrency < opts.workers:
        raise ConfigError(f"--concurrency {opts.concurrency} must be >= --workers {opts.workers}")


def _open_log(run_dir: Path, reg: Registration, k: int, n: int) -> EventLog:
    """Part k of n's event log, opened before t0: its set-up and the full GC pass due after loading pyarrow
    (~50 ms) must not land on the first requests; frozen objects are never rescanned."""
    log = EventLog(run_dir, realtime=reg.realtime, worker=None if n == 1 else k)
    if reg.realtime:
        gc.collect()
        gc.freeze()
    return log


def _replay(
    log: EventLog,
    workload: Workload,
    spec: TargetSpec,
    reg: Registration,
    opts: RunOptions,
    ctx: RunContext,
    stats: ReplayStats,
    progress: Callable[[ReplayStats], None] | None = None,
    watch: Callable[[Event], None] | None = None,
) -> None:
    """Replay part ctx.worker of ctx.workers into `stats` (updated as it goes, so a failure keeps what was
    measured); closes the log."""
    try:
        target = reg.factory(spec, ctx)
        replayer = Replayer(
            target,
            log,
            _share(opts.concurrency, ctx.worker, ctx.workers),
            progress=progress,
            stats=stats,
            closed=opts.closed,
            think_ns=s_to_ns(opts.think_s),
            watch=watch,
        )
        requests = workload.requests()
        with nullcontext() if reg.realtime else _virtual_gc():
            replayer.run(requests if ctx.workers == 1 else shard(requests, ctx.worker, ctx.workers, replayer))
    finally:
        log.close()


def _virtual_gc() -> AbstractContextManager[None]:
    """A simulated run keeps ~10 small tuples a request (log rows, heap entries) until the next flush, and frees
    its requests by reference counting: a young-generation collection every 700 allocations rescans those rows
    for no garbage. Cycles (rare: long-context parts) are still collected, less often."""
    return fewer_collections(VIRTUAL_GC_THRESHOLD)


def shard(requests: Iterator[Request], k: int, n: int, replayer: Replayer) -> Iterator[Request]:
    """Requests of shard k of n. The others still pass the replayer, so the trace-implied reuse recorded per
    request is the same as in a single-process run."""
    for r in requests:
        if (r.session_id if r.session_id >= 0 else r.req_id) % n == k:
            yield r
        else:
            replayer.pass_over(r)


def _share(concurrency: int | None, k: int, n: int) -> int | None:
    return None if concurrency is None else concurrency // n + (1 if k < concurrency % n else 0)


def _forked(workload: Workload, spec: TargetSpec, reg: Registration, opts: RunOptions, run_dir: Path) -> Sharded:
    """The default sharder: `opts.workers` forked processes of this host, one t0 START_MARGIN_NS from now."""
    import multiprocessing

    t0_ns = time.monotonic_ns() + START_MARGIN_NS
    mp = multiprocessing.get_context("fork")
    conns: list[Connection] = []
    procs: list[BaseProcess] = []
    for k in range(opts.workers):
        recv, send = mp.Pipe(duplex=False)
        args = (send, workload, spec, reg, opts, run_dir, k, t0_ns)
        proc = mp.Process(target=_worker, args=args)  # type: ignore[attr-defined]
        proc.start()
        send.close()
        conns.append(recv)
        procs.append(proc)
    return Sharded(*_collect(conns, procs), t0_ns)


def run_shard(
    workload: Workload,
    spec: TargetSpec,
    reg: Registration,
    opts: RunOptions,
    run_dir: Path,
    k: int,
    t0_ns: int,
    run_key: str = "",
) -> Shard:
    """Worker k's part of a sharded run (in a forked child or a Ray actor): its event-log part files go to
    `run_dir`, its times are from `t0_ns` on this process's clock; returns its counts and error. `run_key`: see
    RunContext (a Ray actor's directory and t0 are its own)."""
    stats, error = ReplayStats(status="failed"), None
    try:
        log = _open_log(run_dir, reg, k, opts.workers)
        ctx = RunContext(opts.seed, run_dir, log, t0_ns, worker=k, workers=opts.workers, run_key=run_key)
        _replay(log, workload, spec, reg, opts, ctx, stats)
    except KeyboardInterrupt:
        stats.status = "interrupted"
    except Exception as e:
        error = f"worker {k}: {type(e).__name__}: {e}"
    return asdict(stats), error


def _worker(conn: Connection, *args: Any) -> None:
    """A forked worker: run_shard(*args), its counts and error sent back through `conn`."""
    try:
        conn.send(run_shard(*args))
    finally:
        conn.close()


def _collect(conns: list[Connection], procs: list[BaseProcess]) -> tuple[ReplayStats, list[str]]:
    shards: list[Shard] = []
    for k, (conn, proc) in enumerate(zip(conns, procs)):
        try:
            shards.append(_recv(conn))
        except (EOFError, OSError):
            shards.append((asdict(ReplayStats(status="failed")), f"worker {k} died (exit code {proc.exitcode})"))
        proc.join()
    return combine(shards)


def combine(shards: list[Shard]) -> tuple[ReplayStats, list[str]]:
    """The workers' summed counts and gathered client lags, the worst status of any, and their errors."""
    total, errors, worst = ReplayStats(status="complete"), [], "complete"
    for st, err in shards:
        for key in _COUNTS:
            setattr(total, key, getattr(total, key) + st[key])
        total.last_t_ns = max(total.last_t_ns, st["last_t_ns"])
        total.send_lags_ns.extend(st["send_lags_ns"])
        total.opening_lags_ns.extend(st["opening_lags_ns"])
        worst = max(worst, st["status"] if st["status"] in _STATUS_RANK else "failed", key=_STATUS_RANK.__getitem__)
        if err:
            errors.append(err)
    total.status = worst
    return total, errors


def _recv(conn: Connection) -> tuple[dict[str, Any], str | None]:
    """Ctrl-C reaches the workers too (same process group); they cancel and report, so keep waiting."""
    while True:
        try:
            return conn.recv()
        except KeyboardInterrupt:
            continue


def load_run(run_dir: str | Path) -> dict:
    """run.json of a finished or killed run; a run still marked 'running' was killed (SIGKILL, crash)."""
    m = read_manifest(run_dir)
    if m.get("status") == "running":
        m["status"] = "killed"
    return m
