"""Arrival processes: Poisson, Gamma with burstiness (vLLM's meaning), constant rate, piecewise-constant rate, and
all at once (vLLM's --request-rate inf: every arrival at 0).

All return sorted int64 nanosecond offsets, the first at 0 (a run starts with its first request, as vLLM's
benchmark does; piecewise: a sampled gap after 0, since its rate may start at 0), deterministic for the numpy Generator passed in. `burstiness` is the Gamma shape k with scale
1/(rate*k): mean gap 1/rate, CV = 1/sqrt(k); k = 1 is Poisson, k < 1 burstier, k > 1 smoother.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from kvbench.config import ConfigError
from kvbench.units import NS_PER_S

PROCESSES = ("trace", "poisson", "gamma", "constant", "piecewise", "at-once")
# A run seed, or a path of them ([seed, component], ...) for independent sub-streams (numpy SeedSequence).
Seed = int | Sequence["Seed"]
MAX_GENERATED = 50_000_000  # generated arrivals are arrays in memory (8 bytes each, plus the requests built on them)


@dataclass(frozen=True)
class ArrivalSpec:
    process: str = "poisson"
    rate: float = 1.0  # requests (or sessions) per second
    burstiness: float = 1.0  # Gamma shape (process = "gamma")
    pieces: tuple[tuple[float, float], ...] = ()  # (start_s, rate) for process = "piecewise", start_s ascending

    def validate(self, where: str) -> ArrivalSpec:
        if self.process not in PROCESSES:
            raise ConfigError(
                f"{where}: arrivals.process: expected one of {', '.join(PROCESSES)}, got {self.process!r}"
            )
        if self.process in ("poisson", "gamma", "constant") and not 0 < self.rate < float("inf"):
            raise ConfigError(f"{where}: arrivals.rate: expected requests/s > 0, got {self.rate!r}")
        if self.process == "gamma" and not 0 < self.burstiness < float("inf"):
            raise ConfigError(f"{where}: arrivals.burstiness: expected a Gamma shape > 0, got {self.burstiness!r}")
        if self.process == "piecewise":
            if not all(isinstance(p, tuple) and len(p) == 2 for p in self.pieces):
                raise ConfigError(f"{where}: arrivals.pieces: expected [[start_s, rate], ...] pairs")
            starts = [p[0] for p in self.pieces]
            rates = [r for _, r in self.pieces]
            if (
                not self.pieces
                or starts[0] != 0
                or starts != sorted(set(starts))
                or not all(0 <= r < 1e9 for r in rates)
                or not any(r > 0 for r in rates)
                or not all(s < 1e12 for s in starts)
            ):
                raise ConfigError(
                    f"{where}: arrivals.pieces: expected [[0, rate], [start_s, rate], ...] with "
                    f"increasing start_s from 0, rates >= 0 and one > 0"
                )
        return self


def _expected_count(spec: ArrivalSpec, duration_s: float) -> float:
    if spec.process == "piecewise":
        return _cumulative(spec, duration_s)
    return spec.rate * duration_s


def _cumulative(spec: ArrivalSpec, t_s):
    """Λ(t): expected arrivals by time t of the piecewise-constant rate (the last piece runs forever)."""
    starts = np.array([p[0] for p in spec.pieces], dtype=np.float64)
    rates = np.array([p[1] for p in spec.pieces], dtype=np.float64)
    t = np.asarray(t_s, dtype=np.float64)
    idx = np.searchsorted(starts, t, side="right") - 1
    base = np.concatenate([[0.0], np.cumsum(np.diff(starts) * rates[:-1])])
    return base[idx] + (t - starts[idx]) * rates[idx]


def _piecewise_seconds(spec: ArrivalSpec, unit_times):
    """Invert Λ: unit-rate Poisson times -> times of the piecewise process (inf past a trailing zero rate)."""
    starts = np.array([p[0] for p in spec.pieces], dtype=np.float64)
    rates = np.array([p[1] for p in spec.pieces], dtype=np.float64)
    base = _cumulative(spec, starts)
    idx = np.searchsorted(base, unit_times, side="right") - 1
    # Pieces of rate 0 have base equal to the next piece's: searchsorted(side=right) skips past them.
    with np.errstate(divide="ignore", invalid="ignore"):
        t = starts[idx] + (unit_times - base[idx]) / rates[idx]
    return np.where(rates[idx] > 0, t, np.inf)


def arrival_times_ns(
    spec: ArrivalSpec, rng: np.random.Generator, n: int | None = None, duration_s: float | None = None
) -> np.ndarray:
    """Up to n arrivals (or all within duration_s, or the first n of those) as sorted int64 ns offsets."""
    if n is not None:
        want = n
    elif duration_s is not None:
        mean = _expected_count(spec, duration_s)
        want = int(mean + 6 * mean**0.5 + 16)  # enough that running out before duration_s is ~impossible
    else:
        raise ConfigError("a generated workload needs `requests` or `duration_s`")
    if want > MAX_GENERATED:
        raise ConfigError(
            f"a generated workload of ~{want:,} requests: at most {MAX_GENERATED:,} (they are held in "
            f"memory; lower `requests`, `duration_s` or the rate)"
        )
    gaps_s = _gaps_s(spec, rng, want)
    if spec.process == "piecewise":
        t_s = _piecewise_seconds(spec, np.cumsum(gaps_s))
    else:
        t_s = np.concatenate([[0.0], np.cumsum(gaps_s[:-1])]) if want else np.zeros(0)
    if duration_s is not None:
        t_s = t_s[t_s < duration_s]
    t_s = t_s[np.isfinite(t_s)]
    return np.round(t_s * NS_PER_S).astype(np.int64)


def _gaps_s(spec: ArrivalSpec, rng, n: int):
    if spec.process == "at-once":
        return np.zeros(n)
    if spec.process == "gamma":
        return rng.gamma(spec.burstiness, 1.0 / (spec.rate * spec.burstiness), n)
    if spec.process == "constant":
        return np.full(n, 1.0 / spec.rate)
    if spec.process == "piecewise":
        return rng.exponential(1.0, n)  # unit-rate gaps, mapped through Λ^-1
    return rng.exponential(1.0 / spec.rate, n)


_INT64_SAFE_S = 9.0e9  # seconds; x 1e9 stays below 2**63 ns


def iter_arrivals_ns(spec: ArrivalSpec, seed: Seed, chunk: int = 65_536) -> Iterator[int]:
    """An endless stream of arrival offsets (ns) for re-timing a trace of unknown length, chunk by chunk."""
    rng = np.random.default_rng(seed)
    t_s = 0.0
    first = True
    while True:
        gaps_s = _gaps_s(spec, rng, chunk)
        if spec.process == "piecewise":
            unit = t_s + np.cumsum(gaps_s)
            t_s = float(unit[-1])
            times = _piecewise_seconds(spec, unit)
        else:
            starts = np.concatenate([[t_s], t_s + np.cumsum(gaps_s[:-1])]) if first else t_s + np.cumsum(gaps_s)
            t_s = float(starts[-1])
            times = starts
        first = False
        # Clipped below int64's range: the replay's own bound on arrival times then names the cause.
        finite = np.minimum(times[np.isfinite(times)], _INT64_SAFE_S)
        yield from np.round(finite * NS_PER_S).astype(np.int64).tolist()
        if spec.process == "piecewise" and not np.isfinite(times[-1]):
            return
