"""Synthetic workloads: arrivals x lengths, shared system-prompt groups and multi-turn sessions as hash_ids.

Block ids follow Mooncake: an id names a 512-token block and everything before it. A group's system prompt of
`prefix.tokens` tokens owns floor(tokens/512) ids shared by every request of the group (a partial last block
mixes with the user's text, so it is the request's own). A later turn's prompt is the previous prompt + the
previous answer + a new message: it reuses the previous prompt's full blocks, and everything after is new.
Turn k > 0 gets nominal arrival = turn k-1's nominal arrival + think time; replay releases it think time after
turn k-1 ends. Requests are sorted by arrival and numbered densely; at most `requests` are kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import MOONCAKE_BLOCK_TOKENS, NS_PER_S
from kvbench.workload.arrivals import ArrivalSpec, Seed, arrival_times_ns
from kvbench.workload.dists import LengthSpec, sample_pair


@dataclass(frozen=True)
class PrefixSpec:
    groups: int = 0  # 0: no shared system prompts
    tokens: int = 2048  # system prompt length per group
    popularity: str = "zipf"  # zipf | uniform: how requests pick a group
    zipf_s: float = 1.0  # P(group k) ∝ 1 / (k + 1)^s
    share: float = 1.0  # fraction of sessions that start with a group prompt

    def validate(self, where: str) -> PrefixSpec:
        if self.groups < 0 or self.tokens < 0 or not 0 <= self.share <= 1 or self.zipf_s < 0:
            raise ConfigError(f"{where}: prefix: expected groups >= 0, tokens >= 0, 0 <= share <= 1, zipf_s >= 0")
        if self.popularity not in ("zipf", "uniform"):
            raise ConfigError(f"{where}: prefix.popularity: expected zipf or uniform, got {self.popularity!r}")
        return self


@dataclass(frozen=True)
class SessionSpec:
    turns_min: int = 1  # turns per session, uniform in [turns_min, turns_max]
    turns_max: int = 1
    think_s: float = 0.0  # delay between a turn's end and the next turn's release (mean if exponential)
    think: str = "fixed"  # fixed | exponential
    max_context: int = 131_072  # a session ends before a turn's prompt would exceed this many tokens

    def validate(self, where: str) -> SessionSpec:
        if not 1 <= self.turns_min <= self.turns_max or self.think_s < 0 or self.max_context < 1:
            raise ConfigError(
                f"{where}: sessions: expected 1 <= turns_min <= turns_max, think_s >= 0, max_context >= 1"
            )
        if self.think not in ("fixed", "exponential"):
            raise ConfigError(f"{where}: sessions.think: expected fixed or exponential, got {self.think!r}")
        return self


@dataclass(frozen=True)
class SynthSpec:
    arrivals: ArrivalSpec = field(default_factory=ArrivalSpec)
    input: LengthSpec = field(default_factory=LengthSpec)
    output: LengthSpec = field(default_factory=LengthSpec)
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    sessions: SessionSpec = field(default_factory=SessionSpec)
    requests: int | None = None  # at most this many requests
    duration_s: float | None = None  # sessions start within this many seconds


def finalize(reqs: list[Request], limit: int | None = None) -> list[Request]:
    """Stable sort by arrival (a session's turns keep their order), keep `limit`, number the ids densely."""
    reqs.sort(key=lambda r: r.arrival_ns)
    if limit is not None:
        del reqs[limit:]
    return [r._replace(req_id=i) for i, r in enumerate(reqs)]


def think_times_ns(ss: SessionSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """n think times (int64 ns): all `think_s`, or exponential with that mean."""
    s = np.full(n, ss.think_s) if ss.think == "fixed" else rng.exponential(ss.think_s, n)
    return np.round(s * NS_PER_S).astype(np.int64)


def group_weights(spec: PrefixSpec) -> np.ndarray:
    k = np.arange(spec.groups, dtype=np.float64)
    w = np.ones(spec.groups) if spec.popularity == "uniform" else 1.0 / (k + 1.0) ** spec.zipf_s
    return w / w.sum()


def generate(spec: SynthSpec, seed: Seed, name: str = "", id_base: int = 0) -> list[Request]:
    """The whole workload, deterministic for `seed`; block ids start at `id_base` (mixtures keep them apart)."""
    return list(requests(spec, draw(spec, seed, id_base), name))


@dataclass(frozen=True)
class Draws:
    """Everything random about a generated workload, drawn vectorised (cheap); the requests are built from it as
    they are taken (`requests`). Per session: start, turns, group (-1: none); per turn, in session order: user
    input, output, reasoning and think time. Read-only once drawn."""

    starts: list[int]
    turns: list[int]
    groups: list[int]
    cols: tuple[list[int], list[int], list[int], list[int]]
    id_base: int


def draw(spec: SynthSpec, seed: Seed, id_base: int = 0) -> Draws:
    rng = np.random.default_rng(seed)
    ss = spec.sessions
    mean_turns = (ss.turns_min + ss.turns_max) / 2
    n_sessions = None if spec.requests is None else int(spec.requests / mean_turns * 1.1) + 8
    starts = arrival_times_ns(spec.arrivals, rng, n_sessions, spec.duration_s)
    turns = rng.integers(ss.turns_min, ss.turns_max, len(starts), endpoint=True)
    total = int(turns.sum())
    user_in, out, reason = sample_pair(spec.input, spec.output, rng, total)
    think_ns = think_times_ns(ss, rng, total)
    pf = spec.prefix
    use_group = rng.random(len(starts)) < pf.share
    group = rng.choice(pf.groups, size=len(starts), p=group_weights(pf)) if pf.groups else np.zeros(len(starts), int)
    groups = np.where(use_group, group, -1) if pf.groups else np.full(len(starts), -1)
    cols = (user_in.tolist(), out.tolist(), reason.tolist(), think_ns.tolist())
    return Draws(starts.tolist(), turns.tolist(), groups.tolist(), cols, id_base)


def requests(spec: SynthSpec, d: Draws, name: str = "") -> Iterator[Request]:
    """`generate`'s requests, in its order (sorted by arrival, stable), built as they are taken: a spec of 10^5
    requests replayed with -n 1 builds a handful. Sessions start in arrival order, so a request on the heap with
    arrival <= the next session's start can go: every later request arrives no earlier and, on a tie, was
    generated later, which is exactly the stable sort of `finalize`."""
    pf, ss = spec.prefix, spec.sessions
    prefix_blocks = pf.tokens // MOONCAKE_BLOCK_TOKENS if pf.groups else 0
    ids = _Ids(d.id_base + pf.groups * prefix_blocks)
    heap: list[tuple] = []  # (arrival, generation order, Request fields after req_id) not yet yielded
    made = k = 0  # requests yielded; the session's first row in the drawn columns, also a generation order
    limit = spec.requests if spec.requests is not None else -1
    for sid, (t0, n_turns, g) in enumerate(zip(d.starts, d.turns, d.groups)):
        while heap and heap[0][0] <= t0:
            if made == limit:
                return
            yield Request(made, *heappop(heap)[2])
            made += 1
        base = d.id_base + g * prefix_blocks
        head = tuple(range(base, base + prefix_blocks)) if g >= 0 else ()
        rows = _session(ids, sid, t0, pf.tokens if g >= 0 else 0, head, [c[k : k + n_turns] for c in d.cols], ss, name)
        for row in rows:
            heappush(heap, (row[0], k, row))
            k += 1
        k += n_turns - len(rows)
    while heap and made != limit:
        yield Request(made, *heappop(heap)[2])
        made += 1


class _Ids:
    """Fresh block ids from a counter (one per generate call, so the result depends only on the seed)."""

    __slots__ = ("next",)

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self, n: int) -> tuple[int, ...]:
        first = self.next
        self.next += n
        return tuple(range(first, first + n))


def _session(
    ids: _Ids, sid: int, t0: int, sys_tokens: int, head: tuple[int, ...], cols, ss: SessionSpec, name: str
) -> list[tuple]:
    """The session's requests as Request fields after req_id (numbered when they leave the sort)."""
    user_in, out, reason, think_ns_col = cols
    session_id = sid if ss.turns_max > 1 else -1
    prev_in = prev_out = 0
    prev_ids: tuple[int, ...] = head
    kept_blocks = len(head)
    t = t0
    rows: list[tuple] = []
    for turn in range(len(user_in)):
        n_in = (sys_tokens + user_in[turn]) if turn == 0 else prev_in + prev_out + user_in[turn]
        n_in = max(1, n_in)
        if n_in > ss.max_context:
            break
        need = -(-n_in // MOONCAKE_BLOCK_TOKENS)
        hash_ids = prev_ids[:kept_blocks] + ids.take(need - kept_blocks)
        think_ns = think_ns_col[turn] if turn else 0
        t += think_ns
        n_out = int(out[turn])
        rows.append(
            (t, n_in, n_out, hash_ids, MOONCAKE_BLOCK_TOKENS, session_id, turn, think_ns, int(reason[turn]), None, name)
        )
        prev_in, prev_out, prev_ids = n_in, n_out, hash_ids
        kept_blocks = n_in // MOONCAKE_BLOCK_TOKENS
    return rows
