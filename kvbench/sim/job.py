"""A request's mutable state inside the simulator (one slotted object per request in flight)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from kvbench.records import Request


class JobState(IntEnum):
    """Where a job is in its life; the engine compares states by identity (`is`), members being singletons."""

    WAITING = 0  # queued for prefill on `engine` (routed, recomputing after preemption, or taken out of a batch)
    PREFILL = 1  # admitted: its prompt is being computed, chunk by chunk
    HANDOFF = 2  # prefill done here, KV still reserved until its transfer to the decode engine lands
    DECODE = 3  # in `engine`'s decode batch
    DONE = 4  # ended (FINISH, ERROR, REJECT)


WAITING, PREFILL, HANDOFF, DECODE, DONE = JobState


class Job:
    """Where a request is and what it still needs. Decode progress is lazy: `end_step` is the engine's decode-step
    counter value at which the job's last token is produced, so a run of n steps costs nothing per job."""

    __slots__ = (
        "req",
        "rid",
        "n_in",
        "n_out",
        "state",
        "engine",
        "decode",
        "prefill_left",
        "ctx",
        "cached",
        "hit_tier",
        "kv",
        "join_step",
        "end_step",
        "seq",
        "first_ns",
        "preempts",
        "steps_left",
        "parts",
        "parent",
        "base",
        "pending",
        "xfer_link",
    )

    def __init__(self, req: Request) -> None:
        self.req = req
        self.rid = req.req_id
        self.n_in = req.input_tokens
        self.n_out = req.output_tokens
        self.state = WAITING
        # Engines are typed Any: engine.py imports this module, so naming Engine here would be an import cycle.
        self.engine: Any = None  # Engine it is queued or running on
        self.decode: Any = None  # decode Engine chosen by the router (PD / CPD), None when colocated
        self.prefill_left = req.input_tokens  # tokens still to compute before the first token
        self.ctx = 0  # tokens already in KV (cached prefix + computed)
        self.cached = 0  # prompt tokens served from a prefix cache
        self.hit_tier: str | None = None  # tier kind the cached prefix came from ("hbm", "dram", ...)
        self.kv = 0  # KV tokens reserved on `engine` (prefill: whole prompt; decode: context at join)
        self.join_step = 0  # engine decode-step counter when it joined the decode batch
        self.end_step = 0  # ... when its last token is produced
        self.seq = 0  # tie-breaker in heaps; admission order for preemption
        self.first_ns = -1  # FIRST_TOKEN time, -1 before it
        self.preempts = 0
        self.steps_left = 0  # decode steps still to run (set when leaving a batch: preemption, migration)
        self.parts: list[Job] | tuple = ()  # long-context split: the part jobs computing this prompt on several engines
        self.parent: Job | None = None  # set on a part job: the request it computes a slice of
        self.base = 0  # context tokens whose KV lives on other engines (a part's offset): not reserved here
        self.pending = 0  # parts still computing
        self.xfer_link = ""  # link of its P->D transfer in flight (its KV_XFER_END names it)
