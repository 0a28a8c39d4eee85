"""A request's mutable state inside the simulator (one slotted object per request in flight)."""

from __future__ import annotations

from kvbench.records import Request

WAITING, PREFILL, HANDOFF, DECODE, PAUSED, DONE = range(6)


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
    )

    def __init__(self, req: Request):
        self.req = req
        self.rid = req.req_id
        self.n_in = req.input_tokens
        self.n_out = req.output_tokens
        self.state = WAITING
        self.engine = None  # Engine it is queued or running on
        self.decode = None  # decode Engine chosen by the router (PD / CPD), None when colocated
        self.prefill_left = req.input_tokens  # tokens still to compute before the first token
        self.ctx = 0  # tokens already in KV (cached prefix + computed)
        self.cached = 0  # prompt tokens served from a prefix cache
        self.hit_tier = None  # tier kind the cached prefix came from ("hbm", "dram", ...)
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
