"""Token-length distributions for generated workloads: fixed, uniform, lognormal from p50/p99, ServeGen, CSV.

`lognormal` is fitted to two quantiles: mu = ln(p50), sigma = ln(p99/p50) / z(0.99) with z(0.99) = 2.3263;
samples are rounded and clipped to [min, max]. `servegen` draws from the request-weighted mixture of a ServeGen
model folder's per-client 6 h PMFs; for output lengths of a reasoning model the same draw gives `reason_ratio`
(ServeGen's coupling), so reason_tokens = round(output * ratio). `csv` resamples a length-only CSV column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvbench.config import ConfigError
from kvbench.workload import servegen
from kvbench.workload.csvtraces import read_lengths

Z99 = 2.3263478740408408  # standard normal 0.99 quantile
DISTS = ("fixed", "uniform", "lognormal", "servegen", "csv")
MAX_LEN = 10_000_000


@dataclass(frozen=True)
class LengthSpec:
    dist: str = "fixed"
    tokens: int = 256  # fixed
    min: int = 1  # uniform lower bound; clip floor for the others
    max: int = 131_072  # uniform upper bound; clip ceiling for the others
    p50: float = 0.0  # lognormal
    p99: float = 0.0  # lognormal
    path: str = ""  # servegen model folder or length CSV (already resolved against the spec file)
    column: str = ""  # csv column (default by role: num_prefill_tokens / num_decode_tokens)
    clients: tuple[int, ...] = ()  # servegen clients (empty: all)
    reason_ratio: float | None = None  # output only: fixed reasoning share; servegen reasoning models default to theirs

    def validate(self, where: str, role: str) -> LengthSpec:
        bad = None
        if self.dist not in DISTS:
            bad = f"dist: expected one of {', '.join(DISTS)}, got {self.dist!r}"
        elif not 0 <= self.min <= self.max <= MAX_LEN:
            bad = f"min/max: expected 0 <= min <= max <= {MAX_LEN:,}, got {self.min}, {self.max}"
        elif self.dist == "fixed" and not 0 <= self.tokens <= MAX_LEN:
            bad = f"tokens: expected 0..{MAX_LEN:,}, got {self.tokens}"
        elif self.dist == "lognormal" and not 0 < self.p50 < self.p99:
            bad = f"p50/p99: expected 0 < p50 < p99 (tokens), got {self.p50}, {self.p99}"
        elif self.dist in ("servegen", "csv") and not self.path:
            bad = "path: required for this dist"
        elif not all(isinstance(c, int) and c >= 0 for c in self.clients):
            bad = f"clients: expected ServeGen client ids (integers >= 0), got {list(self.clients)}"
        elif self.reason_ratio is not None and not 0 <= self.reason_ratio <= 1:
            bad = f"reason_ratio: expected 0..1, got {self.reason_ratio}"
        elif self.reason_ratio is not None and role != "output":
            bad = "reason_ratio: only output lengths have a reasoning share"
        if bad:
            raise ConfigError(f"{where}: {role}.{bad}")
        return self


def sample_lengths(spec: LengthSpec, rng: np.random.Generator, n: int, role: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, reason_tokens) as int64 arrays of length n; reason is zeros unless the spec gives a share."""
    ratio = None
    if spec.dist == "fixed":
        x = np.full(n, spec.tokens, dtype=np.float64)
    elif spec.dist == "uniform":
        x = rng.integers(spec.min, spec.max, n, endpoint=True).astype(np.float64)
    elif spec.dist == "lognormal":
        sigma = np.log(spec.p99 / spec.p50) / Z99
        x = np.round(rng.lognormal(np.log(spec.p50), sigma, n))
    elif spec.dist == "servegen":
        x, ratio = _servegen(spec, rng, n, role)
    else:
        x = _csv_column(spec, rng, n, role)
    tokens = np.clip(x, spec.min, spec.max).astype(np.int64) if spec.dist != "fixed" else x.astype(np.int64)
    if spec.reason_ratio is not None:
        ratio = np.full(n, spec.reason_ratio)
    reason = np.zeros(n, dtype=np.int64) if ratio is None else np.round(tokens * ratio).astype(np.int64)
    return tokens, np.minimum(reason, tokens)


def _servegen(spec: LengthSpec, rng, n: int, role: str):
    comps, weights = servegen.mixture(Path(spec.path), list(spec.clients) or None)
    field = "input_tokens" if role == "input" else "output_tokens"
    with_reason = role == "output" and spec.reason_ratio is None and all("reason_ratio" in c for c in comps)
    fields = (field, "reason_ratio") if with_reason else (field,)
    out = servegen.sample_mixture(comps, weights, rng, n, fields)
    return out[field], out.get("reason_ratio")


def _csv_column(spec: LengthSpec, rng, n: int, role: str):
    pairs = np.array(read_lengths(spec.path), dtype=np.int64)
    column = spec.column or ("num_prefill_tokens" if role == "input" else "num_decode_tokens")
    if column not in ("num_prefill_tokens", "num_decode_tokens"):
        raise ConfigError(f"{spec.path}: {role}.column: expected num_prefill_tokens or num_decode_tokens")
    values = pairs[:, 0 if column == "num_prefill_tokens" else 1]
    return values[rng.integers(0, len(values), n)].astype(np.float64)


def sample_pair(
    inp: LengthSpec, out: LengthSpec, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input, output, reason) arrays. Two `servegen` specs on the same folder are drawn jointly, as ServeGen does
    (one component and one uniform per request for all fields); otherwise input and output are independent."""
    joint = inp.dist == out.dist == "servegen" and (inp.path, inp.clients) == (out.path, out.clients)
    if not joint:
        n_in, _ = sample_lengths(inp, rng, n, "input")
        n_out, reason = sample_lengths(out, rng, n, "output")
        return n_in, n_out, reason
    comps, weights = servegen.mixture(Path(inp.path), list(inp.clients) or None)
    with_reason = out.reason_ratio is None and all("reason_ratio" in c for c in comps)
    fields = ("input_tokens", "output_tokens") + (("reason_ratio",) if with_reason else ())
    f = servegen.sample_mixture(comps, weights, rng, n, fields)
    n_in = np.clip(f["input_tokens"], inp.min, inp.max).astype(np.int64)
    n_out = np.clip(f["output_tokens"], out.min, out.max).astype(np.int64)
    ratio = f["reason_ratio"] if with_reason else np.full(n, out.reason_ratio or 0.0)
    return n_in, n_out, np.minimum(n_out, np.round(n_out * ratio).astype(np.int64))
