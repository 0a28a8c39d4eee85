"""Selecting a workload for replay: a trace file, or a spec by name or path, optionally re-timed (--rate).

The entry point of workload/: Workload, shape and find_workload are re-exported so callers need one import.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.workload.arrivals import ArrivalSpec
from kvbench.workload.build import build, for_trace, retimed
from kvbench.workload.inputs import find_workload
from kvbench.workload.spec import load_spec
from kvbench.workload.stream import MAX_RATE_PER_S, MIN_RATE_PER_S, Workload, finite, require_requests, shape
from kvbench.workload.tokens import Tokenizer

__all__ = [
    "Workload",
    "all_at_once",
    "find_workload",
    "from_trace",
    "request_arrivals",
    "require_requests",
    "retime",
    "retime_poisson",
    "select",
    "shape",
]


def from_trace(path: str | Path, seed: int = 0, tokenizer: Tokenizer = "") -> Workload:
    """A trace file replayed as recorded. The format is chosen from the file's first bytes (see build.detect_format);
    files without timestamps (ShareGPT, length CSVs) get Poisson arrivals at 1 req/s from `seed`. `tokenizer`: a
    tokenizer.json counting a text trace's tokens (else ceil(characters / 4))."""
    return for_trace(path, seed, tokenizer)


def select(
    trace: str | Path | None,
    workload: str | None,
    seed: int = 0,
    overrides: tuple[str, ...] = (),
    tokenizer: Tokenizer = "",
) -> Workload:
    """The workload named by --trace FILE or --workload NAME|FILE (exactly one of them); `overrides`: KEY=VALUE
    settings of the workload spec's keys; `tokenizer`: --tokenizer, a tokenizer.json for text traces."""
    if trace is not None and workload is None and not overrides:
        return from_trace(trace, seed, tokenizer)
    if trace is None and workload is not None:
        spec = load_spec(find_workload(workload), overrides=overrides)
        return build(replace(spec, tokenizer=tokenizer) if tokenizer else spec, seed)
    raise ConfigError("give exactly one of --trace FILE or --workload NAME|FILE")


def retime_poisson(w: Workload, rate: float, seed: int) -> Workload:
    """The same requests in the same order, re-timed as a Poisson process at `rate` requests/s (--rate)."""
    return retime(w, rate, 1.0, seed)


def request_arrivals(rate: float, burstiness: float = 1.0) -> ArrivalSpec:
    """vLLM's --request-rate and --burstiness as an arrival process: inf = all at once, else Poisson (burstiness
    1) or Gamma with shape `burstiness`."""
    if rate == float("inf"):
        return ArrivalSpec("at-once")
    finite("--rate (--request-rate)", rate, MIN_RATE_PER_S, MAX_RATE_PER_S)  # one option, two names
    finite("--burstiness", burstiness, 0.0, 1e6, low_open=True)
    return ArrivalSpec("poisson", rate) if burstiness == 1.0 else ArrivalSpec("gamma", rate, burstiness)


def retime(w: Workload, rate: float, burstiness: float, seed: int) -> Workload:
    """The same requests in the same order, re-timed at `rate` requests/s (--rate, --request-rate; inf: all at
    t = 0) as a Poisson process, or Gamma with shape `burstiness`. On a session workload the session starts are
    re-timed, at `rate` x sessions / requests: the request rate is `rate` while answers keep up (a later turn
    waits for the previous one's answer and its think time)."""
    arrivals = request_arrivals(rate, burstiness)
    shaping = {**w.shaping, "rate_per_s": "inf" if arrivals.process == "at-once" else rate} | (
        {"burstiness": burstiness} if burstiness != 1.0 else {}
    )
    if arrivals.process != "at-once":
        starts, requests = session_starts(w)
        start_rate = rate * starts / requests if requests else rate
        arrivals = replace(arrivals, rate=start_rate)
        shaping |= {"start_rate_per_s": start_rate} if starts < requests else {}
    return replace(w, make=retimed(w.make, arrivals, seed), shaping=shaping)


def session_starts(w: Workload) -> tuple[int, int]:
    """(session starts, requests) of a workload, a request outside sessions counting as a start (one pass)."""
    seen: set[int] = set()
    starts = requests = 0
    for r in w.requests():
        requests += 1
        if r.session_id < 0 or r.session_id not in seen:
            seen.add(r.session_id)
            starts += 1
    return starts, requests


def all_at_once(w: Workload) -> bool:
    """Every request is due at the same instant (one pass, stopping at the first that is not): under a cap of N
    in flight such a workload is a closed loop of N users, whatever the cap was meant as."""
    first = None
    for r in w.requests():
        if first is None:
            first = r.arrival_ns
        elif r.arrival_ns != first:
            return False
    return first is not None
