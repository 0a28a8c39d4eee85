"""Selecting a workload (a trace file or a spec) and shaping it (time scale, window, limits) for replay."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

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


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def check_file(path: str | Path) -> Path:
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(f"{p}: is a directory, expected a trace file")
        if not p.is_file():
            raise ConfigError(f"{p}: no such file")
    except OSError as e:  # e.g. a name longer than the file system allows
        raise ConfigError(f"{str(p)[:200]}: cannot open: {e.strerror}") from None
    return p


def from_trace(path: str | Path, seed: int = 0) -> Workload:
    """A trace file replayed as recorded. The format is chosen from the file's first bytes (see build.detect_format);
    files without timestamps (ShareGPT, length CSVs) get Poisson arrivals at 1 req/s from `seed`."""
    from kvbench.workload.build import for_trace

    return for_trace(path, seed)


def workload_dirs() -> list[Path]:
    """Where workload names are looked up: ./workloads, then the workloads/ beside an editable install."""
    return [Path.cwd() / "workloads", Path(__file__).resolve().parents[2] / "workloads"]


def find_workload(ref: str, base: Path | None = None) -> Path:
    """A spec path (relative to `base` when given, else the cwd) or a NAME in the workload dirs."""
    if ref.endswith(".toml") or "/" in ref:
        p = (base / ref) if base is not None and not Path(ref).is_absolute() else Path(ref)
        if not p.is_file():
            raise ConfigError(f"{p}: no such workload spec")
        return p
    dirs = ([base] if base is not None else []) + workload_dirs()
    for d in dirs:
        if (d / f"{ref}.toml").is_file():
            return d / f"{ref}.toml"
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    raise ConfigError(f"unknown workload {ref!r}; known: {', '.join(known) or '(none found)'}")


MAX_ARRIVAL_S = 365 * 86_400  # a replay longer than a year is a unit mix-up (ms read as s, a tiny --rate)
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e7  # one request in ~12 days .. ten million a second


def _finite(name: str, value: float | None, low: float, high: float, *, low_open: bool = False) -> None:
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
    _finite("--time-scale", time_scale, 0.0, 1e6, low_open=True)
    _finite("--start", start_s, 0.0, MAX_ARRIVAL_S)
    _finite("--duration", duration_s, 0.0, MAX_ARRIVAL_S, low_open=True)
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


def select(trace: str | Path | None, workload: str | None, seed: int = 0) -> Workload:
    """The workload named by --trace FILE or --workload NAME|FILE (exactly one of them)."""
    if (trace is None) == (workload is None):
        raise ConfigError("give exactly one of --trace FILE or --workload NAME|FILE")
    if trace is not None:
        return from_trace(trace, seed)
    from kvbench.workload.build import build
    from kvbench.workload.spec import load_spec

    return build(load_spec(find_workload(workload)), seed)


def retime_poisson(w: Workload, rate: float, seed: int) -> Workload:
    """The same requests in the same order, re-timed as a Poisson process at `rate` requests/s (--rate)."""
    from kvbench.workload.arrivals import ArrivalSpec
    from kvbench.workload.build import retimed

    _finite("--rate", rate, MIN_RATE_PER_S, MAX_RATE_PER_S)
    return replace(
        w, make=retimed(w.make, ArrivalSpec("poisson", rate), seed), shaping={**w.shaping, "rate_per_s": rate}
    )
