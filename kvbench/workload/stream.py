"""A workload as a replayable stream of requests (Workload), and its shaping: time scale, window, request limit."""

from __future__ import annotations

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

    def requests(self) -> Iterator[Request]:
        return self.make()


def shape(
    w: Workload,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> Workload:
    """Replay `time_scale`x faster (2.0 halves every gap), keep [start, start+duration) and at most N requests."""
    if time_scale <= 0:
        raise ConfigError(f"--time-scale must be > 0, got {time_scale}")
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

    applied = {"time_scale": time_scale, "start_s": start_s, "duration_s": duration_s, "max_requests": max_requests}
    return replace(w, make=make, shaping={**w.shaping, **applied})
