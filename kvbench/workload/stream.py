"""A workload as a replayable stream of requests (Workload), and its shaping: time scale, window, request limit."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import s_to_ns


@dataclass(frozen=True)
class Workload:
    name: str
    source: str  # trace path or spec path
    digest: str  # content hash of the inputs (for run.json)
    make: Callable[[], Iterator[Request]]  # a fresh iterator per call, sorted by arrival_ns
    slo_ms: dict[str, float] = field(default_factory=dict)  # SLOs the spec declares (ttft, tpot, e2el, tbt)
    shaping: dict[str, object] = field(default_factory=dict)  # what `shape` applied, for run.json
    tokens: str = ""  # how a text trace's token counts were made (tokenizer or estimate); "" as the source says

    def requests(self) -> Iterator[Request]:
        return self.make()


MAX_ARRIVAL_S = 365 * 86_400  # a replay longer than a year is a unit mix-up (ms read as s, a tiny --rate)
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e7  # one request in ~12 days .. ten million a second


def finite(name: str, value: float | None, low: float, high: float, *, low_open: bool = False) -> None:
    """A one-line error unless `value` is a finite number within [low, high] ((low, high] with low_open)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise ConfigError(f"{name} must be a finite number {bound} and <= {high:g}, got {value}")


def shape(
    w: Workload,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> Workload:
    """Replay `time_scale`x faster (2.0 halves every gap), keep [start, start+duration) and at most N requests.

    A session cut by the window keeps its turns from the first one inside it: that turn becomes the session's
    start (turn 0, at its recorded arrival) and later turns are renumbered from it; see `rebase_sessions`."""
    finite("--time-scale", time_scale, 1e-6, 1e6)
    finite("--start", start_s, 0.0, MAX_ARRIVAL_S)
    finite("--duration", duration_s, 0.0, MAX_ARRIVAL_S, low_open=True)
    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"--max-requests must be >= 1, got {max_requests}")
    start_ns = s_to_ns(start_s)
    end_ns = None if duration_s is None else start_ns + s_to_ns(duration_s)
    inner = w.make

    def make() -> Iterator[Request]:
        n = 0
        for r in inner():
            if r.arrival_ns < start_ns:
                continue
            if (end_ns is not None and r.arrival_ns >= end_ns) or (max_requests is not None and n >= max_requests):
                return
            n += 1
            t = r.arrival_ns - start_ns
            yield r if time_scale == 1.0 and not start_ns else r._replace(arrival_ns=int(round(t / time_scale)))

    def bounded() -> Iterator[Request]:
        if time_scale == 1.0 and not start_ns and end_ns is None and max_requests is None:
            return _bounded(inner())  # nothing to shape: one generator less per request
        return _bounded(rebase_sessions(make()) if start_ns else make())

    applied = {"time_scale": time_scale, "start_s": start_s, "duration_s": duration_s, "max_requests": max_requests}
    return replace(w, make=bounded, shaping={**w.shaping, **applied})


def require_requests(w: Workload) -> None:
    """A one-line error when the shaped workload holds no request (a window past the trace's end, say)."""
    if next(w.requests(), None) is None:
        shaped = ", ".join(f"{k}={v}" for k, v in w.shaping.items() if v not in (None, 0, 0.0, 1.0))
        raise ConfigError(f"{w.name}: no requests to replay" + (f" after {shaped}" if shaped else ""))


def rebase_sessions(requests: Iterator[Request]) -> Iterator[Request]:
    """Renumber each session's turns from its first request in the stream (a cut dropped the earlier ones)."""
    first_turn: dict[int, int] = {}
    for r in requests:
        if r.session_id < 0:
            yield r
            continue
        base = first_turn.setdefault(r.session_id, r.turn)
        yield r if base == 0 else r._replace(turn=r.turn - base)


def _bounded(requests: Iterator[Request]) -> Iterator[Request]:
    limit_ns = s_to_ns(MAX_ARRIVAL_S)
    for r in requests:
        if not 0 <= r.arrival_ns <= limit_ns:
            raise ConfigError(
                f"request {r.req_id} would arrive at {r.arrival_ns / 1e9:.3g} s, beyond the {MAX_ARRIVAL_S // 86_400}"
                "-day bound of a replay: check --rate, --time-scale and the trace's timestamps"
            )
        yield r
