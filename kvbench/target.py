"""The target extension point's types: the Target protocol, a resolved --target (TargetSpec), what a target is
built with (RunContext) and how a kind registers (Registration); the name -> registration dict is in targets.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvbench.records import Emit, Request

if TYPE_CHECKING:  # pyarrow's import (~0.2 s) is not for `kvbench serve`, which builds targets without a log
    from kvbench.eventlog import EventLog


class Target(Protocol):
    """Something requests are replayed against.

    Contract (tests/test_target_contract.py checks it for every target):
    - `submit(req, at_ns)` may be called before `run` and from inside `emit` callbacks during `run`;
      `at_ns` is the intended release time (ns from run start, >= the time of the event being handled).
    - `run(emit)` releases each request at `at_ns` (emitting ARRIVE with t = at_ns, then SEND, ...) and returns
      once every submitted request has ended with exactly one terminal event (FINISH, ERROR, REJECT, CANCEL).
    - On KeyboardInterrupt, `run` emits CANCEL (detail "interrupted") for every request not yet ended, then re-raises;
      each CANCEL at the moment of the interruption, and a request not yet released gets no ARRIVE.
    - A target writes only through the event log's API (`RunContext.log`): events through `emit`, CHUNK events
      through `log.emit_chunk((t_ns, req_id, tokens))` (never terminal; a real-time target's per-read event, kept
      off the replayer's callback), rows of a named side table through `log.table(name).append(row)`. When rows
      reach disk is the log's business.
    """

    def submit(self, req: Request, at_ns: int) -> None: ...

    def run(self, emit: Emit) -> None: ...


@dataclass(frozen=True)
class TargetSpec:
    kind: str  # key of kvbench.targets.TARGETS
    name: str  # preset / profile name or URL, for display
    params: dict[str, Any] = field(default_factory=dict)  # profile contents after --set overrides
    source: str = ""  # where it came from (file path or the --target string)

    def digest(self) -> str:
        blob = json.dumps({"kind": self.kind, "params": self.params}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunContext:
    seed: int
    run_dir: Path
    log: EventLog  # the run's (or this worker's) event log: the only way a target writes
    t0_ns: int = 0  # time.monotonic_ns() at run start: real-time targets measure t_ns from it
    worker: int = 0
    workers: int = 1
    # What names the run alike in every worker (e.g. a prompt salt); "" means run_dir|t0_ns, which workers on other
    # hosts do not share: their t0_ns is on their own clock and they log into a directory of their own.
    run_key: str = ""


def as_is(spec: TargetSpec) -> TargetSpec:
    """The prepare step of targets that need none."""
    return spec


@dataclass(frozen=True)
class Registration:
    """How the runner builds and treats one kind of target."""

    factory: Callable[[TargetSpec, RunContext], Target]
    # Run once before the run's t0, in the parent of any workers: set-up that must not count as run time
    # (probing an endpoint, importing the target's modules). Returns the spec the run records and workers get.
    prepare: Callable[[TargetSpec], TargetSpec] = as_is
    # True: t_ns is wall-clock from RunContext.t0_ns (a real endpoint), so the log flushes about every second,
    # client lag is checked and the replay may be sharded over worker processes. False: virtual time.
    realtime: bool = False
