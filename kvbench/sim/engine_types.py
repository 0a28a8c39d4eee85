"""The types around an engine: what it sees of its host, a callback it takes, the record of its step in flight."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from kvbench.sim.job import Job
from kvbench.sim.rows import EmitRow

# The engine type (engine.py's Engine) is a parameter here, not an import: engine.py imports this module.
E = TypeVar("E", contravariant=True)

# Called when a job leaves the decode batch at a step boundary: (job, decode steps it still needs, t_ns).
Detached = Callable[[Job, int, int], None]


class EngineHost(Protocol[E]):
    """What an engine sees of the simulator: the event sink and the request lifecycle's four callbacks."""

    emit: EmitRow

    def prefill_done(self, e: E, job: Job, t: int) -> None: ...

    def decode_done(self, e: E, job: Job, t: int) -> None: ...

    def preempted(self, e: E, job: Job, t: int) -> None: ...

    def incoming_ready(self, e: E, job: Job, t: int) -> None: ...


class RunningStep:
    """The batch step, or run of identical decode steps, an engine has in flight (one record per engine, reused)."""

    __slots__ = ("t0_ns", "n_steps", "batch", "kv_tokens", "chunks", "prefill_tokens", "kv_blocks", "cut")

    def __init__(self) -> None:
        self.t0_ns = 0  # when it started
        self.n_steps = 0  # decode steps in the run (1 for a step that carries prefill)
        self.batch = 0  # decoding requests in it
        self.kv_tokens = 0  # KV tokens of the decode batch when it started
        self.chunks: list[tuple[Job, int]] | tuple[()] = ()  # (job, prefill tokens) computed in the step
        self.prefill_tokens = 0  # sum of the chunks
        self.kv_blocks = 0  # KV blocks in use when it started
        # cut short already: it ends with the step that was in flight, so a later cut in it changes nothing
        self.cut = False
