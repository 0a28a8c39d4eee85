"""Request and Event value types: immutable tuples, cheap to build on the hot path."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Request(NamedTuple):
    """One request of a workload. Times are int ns from the workload's start; lengths in tokens."""

    req_id: int
    arrival_ns: (
        int  # intended release time (for turn > 0 of a session: nominal; replay releases on the previous FINISH)
    )
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # Mooncake-style prefix block ids: equal id => same block and same prefix
    block_tokens: int = 512  # tokens per hash block
    session_id: int = -1  # -1: not part of a session
    turn: int = 0  # 0-based turn within its session
    think_ns: int = 0  # delay between the previous turn's FINISH and this turn's release
    reason_tokens: int = 0  # part of output_tokens that is reasoning (long-CoT mixes)
    prompt: str | None = None  # real prompt text where the workload has it (ShareGPT); else synthesised from hash_ids
    workload: str = ""  # name of the (sub)workload it came from, for mixtures


class Event(NamedTuple):
    """One row of the event log. `t_ns` is the offset from run start (virtual time for the sim)."""

    t_ns: int
    req_id: int
    kind: str
    instance: str | None = None
    tokens: int | None = None
    cached_tokens: int | None = None
    tier: str | None = None
    nbytes: int | None = None
    detail: str | None = None


# An emit callback takes an Event or, on hot paths where NamedTuple construction costs ~1 µs, a plain 9-tuple
# in Event's field order (the log and the replayer read fields by position).
Emit = Callable[[Event], None]

# Kinds every target emits.
ARRIVE = "ARRIVE"  # t = intended release time; tokens = input tokens
SEND = "SEND"  # request left the client (real) / reached the router (sim)
FIRST_TOKEN = "FIRST_TOKEN"  # tokens = tokens in the first chunk; cached_tokens where known
CHUNK = "CHUNK"  # a later streamed chunk (real targets); tokens = tokens in it
LAST_TOKEN = "LAST_TOKEN"  # tokens = output tokens received in all
FINISH = "FINISH"  # terminal, success; tokens = output tokens, cached_tokens = prompt tokens served from cache
ERROR = "ERROR"  # terminal; detail = "<reason>: <message>"
REJECT = "REJECT"  # terminal; admission control / HTTP 429
CANCEL = "CANCEL"  # terminal; interrupted, or a session's earlier turn failed
# Kinds only the simulator emits.
ROUTE = "ROUTE"
PREFILL_START = "PREFILL_START"
PREFILL_END = "PREFILL_END"
KV_XFER_START = "KV_XFER_START"
KV_XFER_END = "KV_XFER_END"
DECODE_START = "DECODE_START"
PREEMPT = "PREEMPT"
MIGRATE = "MIGRATE"

TERMINAL = frozenset({FINISH, ERROR, REJECT, CANCEL})
COMMON_KINDS = (ARRIVE, SEND, FIRST_TOKEN, CHUNK, LAST_TOKEN, FINISH, ERROR, REJECT, CANCEL)
SIM_KINDS = (ROUTE, PREFILL_START, PREFILL_END, KV_XFER_START, KV_XFER_END, DECODE_START, PREEMPT, MIGRATE)
ALL_KINDS = COMMON_KINDS + SIM_KINDS
