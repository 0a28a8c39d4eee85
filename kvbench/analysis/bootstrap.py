"""Bootstrap confidence intervals for the difference of a statistic between two runs, from per-request samples.

Each run contributes a seeded random subsample of at most MAX_SAMPLE per-request values per metric (summary.json
stores the same subsample, so a baseline summary file compares like a run directory). RESAMPLES resamples with
replacement of that subsample give the statistic's bootstrap deviations; with m values kept out of n, deviations
are scaled by sqrt(m / n) (the m-out-of-n bootstrap: statistics' spread shrinks as 1/sqrt(n)). The interval of
the difference is the point difference plus the LEVEL central interval of (candidate - baseline) deviations.
One configuration for every interval (summary.json, `kvbench compare`, `kvbench gate`, the report's comparison),
so a pair of runs gets the same interval wherever it is shown: 1,000 resamples of at most 2,000 values keep
`kvbench compare` of two 12,000-request runs under a second of CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.analysis import catalogue
from kvbench.analysis.catalogue import PERCENTILES
from kvbench.units import ns_to_ms

if TYPE_CHECKING:
    import duckdb
    import numpy

MAX_SAMPLE = 2_000
RESAMPLES = 1_000
LEVEL = 0.95
_Q = dict(PERCENTILES)


def samples(con: duckdb.DuckDBPyConnection, seed: int = 0, max_n: int = MAX_SAMPLE) -> dict[str, dict[str, Any]]:
    """Per metric: n (values in the run) and `values`, a seeded subsample of at most max_n of them."""
    import numpy as np

    sampled = catalogue.samples()
    cols = ", ".join(_select(name, m) for name, m in sampled.items())
    data = con.execute(f"SELECT {cols} FROM per_request ORDER BY arrival_ns, req_id").fetchnumpy()
    out: dict[str, dict[str, Any]] = {}
    for name, m in sampled.items():
        v: numpy.ndarray = np.ma.masked_invalid(
            np.ma.asarray(data[name], dtype=float)
        ).compressed()  # NULLs come masked
        n = len(v)
        if n > max_n:
            v = v[np.sort(np.random.default_rng(seed).choice(n, max_n, replace=False))]
        scale = ns_to_ms if m.unit == "ms" else float  # per_request holds ns
        out[name] = {"n": n, "values": [round(scale(float(x)), 6) for x in v]}
    return out


def _select(name: str, m: catalogue.Metric) -> str:
    """The sample column of metric `m`: its expression over per_request where its filter holds, else NULL."""
    expr, where = m.sample or ("NULL", "false")
    return f'CASE WHEN {where} THEN {expr} END AS "{name}"'


def statistic(values: numpy.ndarray, stat: str, axis: int | None = None) -> Any:
    """mean or a percentile (p50 ... p99.9, numpy's linear method) along `axis`."""
    import numpy as np

    if stat == "mean":
        return values.mean(axis=axis)
    return np.quantile(values, _Q[stat], axis=axis)


def has_ci(sample_name: str, stat: str) -> bool:
    """Whether a statistic of this metric gets a bootstrap interval (it has per-request samples)."""
    return sample_name in catalogue.samples() and (stat == "mean" or stat in _Q)


def _deviations(sample: dict[str, Any], stat: str, rng: numpy.random.Generator, resamples: int) -> numpy.ndarray:
    import numpy as np

    v = np.asarray(sample["values"], dtype=float)
    idx = rng.integers(0, len(v), size=(resamples, len(v)))
    boot = statistic(v[idx], stat, axis=1)
    return (boot - statistic(v, stat)) * np.sqrt(len(v) / max(sample["n"], len(v)))


def delta_ci(
    base: dict[str, Any] | None,
    cand: dict[str, Any] | None,
    stat: str,
    delta: float,
    seed: int = 0,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """The `level` interval of (candidate - baseline) of `stat`, around the point difference `delta`."""
    import numpy as np

    if not base or not cand or len(base["values"]) < 2 or len(cand["values"]) < 2:
        return None
    rng = np.random.default_rng(seed)
    dev = _deviations(cand, stat, rng, resamples) - _deviations(base, stat, rng, resamples)
    lo, hi = np.quantile(dev, [(1 - level) / 2, (1 + level) / 2])
    return float(delta + lo), float(delta + hi)
