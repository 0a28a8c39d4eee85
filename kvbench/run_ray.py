"""`replay --workers N --ray ADDRESS`: a real-endpoint replay's worker shards as Ray actors spread over the cluster.

Each actor runs run.run_shard, the function a forked worker runs, so the replay loop is the one of a local
`--workers N` run. Clocks: CLOCK_MONOTONIC is per host, so before t0 the driver measures each actor's offset to its
own clock (CLOCK_PROBES round trips; the midpoint of the fastest, as NTP does, is off by at most half its round trip)
and hands every actor the driver's t0 on that actor's clock. Events: an actor that sees the driver's run directory
(same host, or a shared file system) logs into it as a forked worker does, so a killed driver keeps what was
flushed; any other logs into a scratch directory and returns its part files through the object store, which the
driver writes into its run directory. Either way that looks like a local sharded run's. Ctrl-C on the driver sets a
stop flag that a thread of each actor waits on; it interrupts the actor's main thread as Ctrl-C interrupts a forked
worker, and the actor returns what it logged.
"""

from __future__ import annotations

import _thread
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError
from kvbench.eventlog import read_manifest
from kvbench.raycluster import Files, connect, files_of, put_files
from kvbench.replayer import ReplayStats
from kvbench.run import RunOptions, Shard, Sharded, combine, execute, run_shard
from kvbench.target import Registration, TargetSpec
from kvbench.targets import registration
from kvbench.units import NS_PER_MS
from kvbench.workload.load import Workload

CLOCK_PROBES = 8  # round trips per actor; the fastest one bounds the offset's error
START_MARGIN_NS = 500 * NS_PER_MS  # t0 this far after the last clock probe: the run calls reach every actor first
READY_TIMEOUT_S = 120  # placing the actors and loading the workload (a cluster short of CPUs never gets there)
STOP_TIMEOUT_S = 60  # after Ctrl-C: how long the actors get to cancel and send back what they logged


@dataclass(frozen=True)
class Job:
    """What every actor replays its shard of: the workload as its list of requests (a node need not have the
    trace file), the prepared target and the run's options."""

    workload: Workload
    spec: TargetSpec
    reg: Registration
    opts: RunOptions


@dataclass(frozen=True)
class Clock:
    """An actor's clock against the driver's: actor time = driver time + offset_ns, within rtt_ns / 2."""

    offset_ns: int
    rtt_ns: int


@dataclass(frozen=True)
class Done:
    """What an actor sends back: its shard's counts and error, its files (none when it logged into the driver's
    run directory itself) and when it began, on its clock."""

    shard: Shard
    files: Files
    begun_ns: int
    shared: bool


def execute_on_ray(
    workload: Workload, spec: TargetSpec, opts: RunOptions, address: str, shared_dir: bool = True
) -> tuple[Path, ReplayStats]:
    """run.execute with the `opts.workers` shards as Ray actors on the cluster at `address` ('auto': the running
    one, else a local one); real-time targets only. `shared_dir=False`: every actor returns its files through the
    object store, even one that sees the run directory."""
    reg = registration(spec.kind)
    if not reg.realtime:
        raise ConfigError(
            f"--ray runs the load generators of a real endpoint; target {spec.name!r} ({spec.kind}) runs in "
            "virtual time (sweeps and plans take --ray)"
        )
    leave = connect(address)
    try:
        _check_cpus(opts.workers, address)
        return execute(workload, spec, opts, sharder=partial(on_ray, address=address, shared_dir=shared_dir))
    finally:
        leave()


def on_ray(
    workload: Workload,
    spec: TargetSpec,
    reg: Registration,
    opts: RunOptions,
    run_dir: Path,
    address: str = "auto",
    shared_dir: bool = True,
) -> Sharded:
    """The sharder of execute_on_ray: place the actors, measure their clocks, release them against one t0."""
    import ray

    reqs = tuple(workload.requests())
    job = ray.put(Job(replace(workload, make=partial(iter, reqs)), spec, reg, opts))
    flag: Any = ray.remote(num_cpus=0)(StopFlag).remote()  # handles: Ray's stubs type their methods as plain ones
    actor = ray.remote(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0)(ShardActor)
    actors: list[Any] = [actor.remote() for _ in range(opts.workers)]
    try:
        places = _placed(actors, job, address)
        clocks = [measure_clock(a) for a in actors]
        t0_ns = time.monotonic_ns() + START_MARGIN_NS
        run_key = f"{run_dir.resolve()}|{t0_ns}"  # what a local run's workers would all salt their prompts with
        stop = [flag.wait.remote()]  # in a list, so the actors get the reference rather than wait for its value
        at = (str(run_dir), read_manifest(run_dir)["run_id"] if shared_dir else None)
        refs = [
            a.run.remote(k, t0_ns + c.offset_ns, run_key, stop, *at) for k, (a, c) in enumerate(zip(actors, clocks))
        ]
        shards, done = _gather(refs, flag, run_dir)
    finally:
        for handle in [*actors, flag]:
            ray.kill(handle)
    stats, errors = combine(shards)
    workers = [_worker_entry(k, *w, t0_ns) for k, w in enumerate(zip(places, clocks, done))]
    return Sharded(stats, errors, t0_ns, {"ray": {"address": address, "workers": workers}})


def _worker_entry(k: int, place: dict[str, str], clock: Clock, done: Done | None, t0_ns: int) -> dict[str, Any]:
    """run.json's record of actor k: where it ran, its clock against the driver's, how its files came back and
    how long before its t0 it was ready (negative: it began late)."""
    entry: dict[str, Any] = {"worker": k, **place, "clock_offset_ns": clock.offset_ns, "clock_rtt_ns": clock.rtt_ns}
    if done is not None:
        entry["files"] = "shared directory" if done.shared else "object store"
        entry["start_slack_ns"] = t0_ns + clock.offset_ns - done.begun_ns
    return entry


def _placed(actors: list[Any], job: Any, address: str) -> list[dict[str, str]]:
    """Where each actor runs, once all hold the job; a cluster that cannot place them all in time is an error."""
    import ray

    try:
        return ray.get([a.load.remote(job) for a in actors], timeout=READY_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise ConfigError(f"--ray {address}: {len(actors)} actors not started within {READY_TIMEOUT_S} s") from None


def _check_cpus(workers: int, address: str) -> None:
    """Each actor takes a CPU: a cluster with fewer would leave some unplaced until READY_TIMEOUT_S."""
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < workers:
        raise ConfigError(f"--workers {workers} needs {workers} CPUs on the Ray cluster ({address}); it has {cpus}")


def measure_clock(actor: Any, probes: int = CLOCK_PROBES) -> Clock:
    """The actor's clock offset from the midpoint of the fastest of `probes` round trips: the actor read its clock
    between the send and the answer, so the error is at most half that round trip."""
    import ray

    best: Clock | None = None
    for _ in range(probes):
        sent = time.monotonic_ns()
        theirs = ray.get(actor.clock_ns.remote())
        back = time.monotonic_ns()
        if best is None or back - sent < best.rtt_ns:
            best = Clock(theirs - (sent + back) // 2, back - sent)
    assert best is not None
    return best


def _gather(refs: list[Any], flag: Any, run_dir: Path) -> tuple[list[Shard], list[Done | None]]:
    """Wait for every actor's shard, writing its files into `run_dir` as it comes; Ctrl-C sets the stop flag and
    keeps waiting (up to STOP_TIMEOUT_S) for what the actors logged."""
    import ray

    index = {ref: k for k, ref in enumerate(refs)}
    shards: list[Shard] = [(_failed(), f"worker {k}: did not stop within {STOP_TIMEOUT_S} s") for k in index.values()]
    done: list[Done | None] = [None] * len(refs)
    pending, deadline = list(refs), None
    while pending:
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        except KeyboardInterrupt:
            if deadline is None:
                flag.set.remote()
                deadline = time.monotonic() + STOP_TIMEOUT_S
            continue
        if not ready:
            break  # stopped, and some actor did not answer in time
        k = index[ready[0]]
        try:
            done[k] = d = ray.get(ready[0])
            put_files(run_dir, d.files)
            shards[k] = d.shard
        except ray.exceptions.RayError as e:
            shards[k] = (_failed(), f"worker {k}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}")
    return shards, done


def _failed() -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(ReplayStats(status="failed"))


class StopFlag:
    """Set once by the driver on Ctrl-C; every actor has a thread waiting on it (an async actor: waits cost
    nothing)."""

    def __init__(self) -> None:
        import asyncio

        self._set = asyncio.Event()

    async def wait(self) -> bool:
        await self._set.wait()
        return True

    async def set(self) -> None:
        self._set.set()


class ShardActor:
    """One worker shard's load generator, on whichever node Ray placed it. A plain (not threaded) actor: its
    methods run in the process's main thread, where a signal (and so an interruption) is delivered."""

    def __init__(self) -> None:
        self.job: Job | None = None

    def load(self, job: Job) -> dict[str, str]:
        """Take the job before t0 (unpickling the workload is not run time); where this actor runs."""
        import ray

        self.job = job
        return {"host": socket.gethostname(), "node_ip": ray.util.get_node_ip_address()}

    def clock_ns(self) -> int:
        return time.monotonic_ns()

    def run(self, k: int, t0_ns: int, run_key: str, stop: list[Any], run_dir: str, run_id: str | None) -> Done:
        """Shard k released against `t0_ns` (this host's clock), logged into the driver's `run_dir` when this node
        sees that run there (`run_id`; None: never), else into a scratch directory whose files it returns."""
        begun = time.monotonic_ns()
        assert self.job is not None, "load() first"
        j = self.job
        # Ctrl-C's path (asyncio.Runner cancels the run) needs SIGINT at Python's default, whatever Ray inherited.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        shared = run_id is not None and _sees(Path(run_dir), run_id)
        with tempfile.TemporaryDirectory(prefix="kvbench-shard-") as tmp:
            into = Path(run_dir) if shared else Path(tmp)
            ended = threading.Event()  # the interrupting thread starts last: run_shard is what it interrupts
            threading.Thread(target=_interrupt_on, args=(stop[0], ended), daemon=True).start()
            shard = run_shard(j.workload, j.spec, j.reg, j.opts, into, k, t0_ns, run_key)
            ended.set()
            return Done(shard, {} if shared else files_of(into), begun, shared)


def _sees(run_dir: Path, run_id: str) -> bool:
    """Whether this node sees the driver's run directory (the same host, or a shared file system)."""
    try:
        return read_manifest(run_dir).get("run_id") == run_id
    except (OSError, ValueError):
        return False


def _interrupt_on(stop: Any, ended: threading.Event) -> None:
    """Once the driver sets the stop flag, interrupt the main thread as Ctrl-C would, unless the shard has ended."""
    import ray

    try:
        ray.get(stop)
    except Exception:
        return  # the flag is gone: the run is over
    if not ended.is_set():
        _thread.interrupt_main()
