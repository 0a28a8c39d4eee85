"""Calibration from a real server: small generated workloads replayed closed-loop, their TTFT and ITL turned into a
measured step-time profile (kvbench/sim/cost/profile.py's CSV) and a report of the fit.

Phases, each one kvbench run (kvbench.run.execute) in its own subdirectory, read back with the analysis SQL:
* prefill, cold: one request at a time (closed loop, concurrency 1) over a ladder of prompt lengths, each prompt
  new to the server; engine time = FIRST_TOKEN - SEND (client lag excluded);
* prefill after a cached prefix: a prompt of `prefix` tokens sent, then the same prefix plus `new` tokens; the
  second's time is a row (new, cached tokens the server reported);
* decode: `batch` requests of `context` prompt tokens at concurrency `batch` (at most the server's slots, so
  nothing queues); a step is the median of each request's inter-token gaps (robust to the few gaps a prefill
  interrupts), kv_tokens = batch x (context + half the output).
Prefill is fitted as t(n) = a + b*n + c*n^2 (non-negative coefficients: attention makes it super-linear) and the
profile holds the fit on the measured ladder plus two longer points; decode rows are the medians as measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import ns_to_ms

if TYPE_CHECKING:
    import pandas

    from kvbench.target import TargetSpec

WARMUP_TOKENS = 32  # the first request of a phase opens connections and warms the server: not measured
HASH_BASE = 1_000_000  # hash ids of calibration prompts: far from a trace's, so nothing is cached by accident


@dataclass(frozen=True)
class CalibrationPlan:
    spec: TargetSpec
    out_dir: Path  # one run directory per phase below this
    prompt_tokens: tuple[int, ...] = (64, 256, 512, 1024, 1536, 2048)
    cached: tuple[tuple[int, int], ...] = ((1024, 256), (1024, 1024), (2048, 512))  # (prefix, new) tokens
    batches: tuple[int, ...] = (1, 2, 4)
    contexts: tuple[int, ...] = (128, 1024, 2048)
    decode_tokens: int = 64
    repeats: int = 3
    budget_s: float = 120.0  # phases stop starting new runs past this
    seed: int = 0


@dataclass
class Measured:
    """What the phases measured: (new, context, ms) prefill samples, (batch, kv_tokens, ms) decode steps."""

    prefill: list[tuple[int, int, float]] = field(default_factory=list)
    decode: list[tuple[int, int, float]] = field(default_factory=list)
    lag_p99_ms: dict[str, float] = field(default_factory=dict)  # per run: the client's send lag p99
    runs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # phases left out by the time budget


def _req(i: int, tokens: int, out: int, ids: tuple[int, ...], block: int) -> Request:
    return Request(i, 0, tokens, out, ids, block_tokens=block)


def cold_requests(plan: CalibrationPlan) -> list[Request]:
    """A warm-up, then `repeats` passes over the ladder; each prompt one block of its own length, never seen."""
    reqs = [_req(0, WARMUP_TOKENS, 2, (HASH_BASE,), WARMUP_TOKENS)]
    for n in plan.prompt_tokens * plan.repeats:
        i = len(reqs)
        reqs.append(_req(i, n, 2, (HASH_BASE + i,), n))
    return reqs


def cached_requests(plan: CalibrationPlan) -> list[Request]:
    """Per (prefix, new) and repeat: the prefix alone (fills the cache), then prefix + new (measured)."""
    reqs = [_req(0, WARMUP_TOKENS, 2, (HASH_BASE + 500_000,), WARMUP_TOKENS)]
    for r in range(plan.repeats):
        for k, (prefix, new) in enumerate(plan.cached):
            pid = HASH_BASE + 600_000 + 1000 * r + k
            reqs.append(_req(len(reqs), prefix, 2, (pid,), prefix))
            reqs.append(_req(len(reqs), prefix + new, 2, (pid, HASH_BASE + 700_000 + len(reqs)), prefix))
    return reqs


def decode_requests(plan: CalibrationPlan, batch: int, context: int) -> list[Request]:
    """Two waves of `batch` requests with prompts of `context` tokens, all new to the server."""
    base = HASH_BASE + 800_000 + 10_000 * batch + context
    return [_req(i, context, plan.decode_tokens, (base * 100 + i,), context) for i in range(2 * batch)]


def _replay(plan: CalibrationPlan, name: str, reqs: list[Request], concurrency: int, m: Measured) -> pandas.DataFrame:
    """One closed-loop run of `reqs`; its per-request rows (kvbench.analysis.metrics.per_request) and ITL medians."""
    from kvbench.analysis.metrics import open_runs, per_request
    from kvbench.run import RunOptions, execute
    from kvbench.workload.stream import Workload

    wl = Workload(f"calibrate-{name}", "kvbench calibrate", name, lambda: iter(reqs))
    run_dir, stats = execute(wl, plan.spec, RunOptions(plan.seed, concurrency, plan.out_dir / name))
    if stats.status == "interrupted":
        raise KeyboardInterrupt
    if stats.finished < len(reqs):
        raise ConfigError(f"calibrate: {name}: {stats.finished} of {len(reqs)} requests finished (see {run_dir})")
    con = open_runs([run_dir])
    try:
        df = per_request(con)
        gaps = con.execute("SELECT req_id, median(gap_ns) AS step_ns FROM event_gaps GROUP BY req_id").df()
    finally:
        con.close()
    m.runs.append(str(run_dir))
    m.lag_p99_ms[name] = round(ns_to_ms(float(df["lag_ns"].iloc[1:].quantile(0.99))), 3) if len(df) > 1 else 0.0
    return df.merge(gaps, on="req_id", how="left")


def _engine_ms(df: pandas.DataFrame) -> pandas.Series:
    """FIRST_TOKEN - SEND in ms: the server's time to first token, without the client's own lag."""
    return ns_to_ms(df["first_ns"] - df["send_ns"])


def measure(plan: CalibrationPlan) -> Measured:
    """Run the phases (cold prefill, cached prefill, decode per batch and context) within the time budget."""
    m, t0 = Measured(), time.monotonic()
    df = _replay(plan, "prefill-cold", cold_requests(plan), 1, m).iloc[1:]
    m.prefill += [(int(n), 0, float(t)) for n, t in zip(df["input_tokens"], _engine_ms(df))]
    if plan.cached:
        df = _replay(plan, "prefill-cached", cached_requests(plan), 1, m).iloc[1:]
        df = df[df["req_id"] % 2 == 0]  # the second of each pair: prefix + new
        cached = df["cached_tokens"].fillna(0).astype(int)
        m.prefill += [
            (int(n - c), int(c), float(t)) for n, c, t in zip(df["input_tokens"], cached, _engine_ms(df)) if n > c
        ]
    for b in plan.batches:
        for c in plan.contexts:
            name = f"decode-b{b}-c{c}"
            if time.monotonic() - t0 > plan.budget_s:
                m.skipped.append(name)
                continue
            df = _replay(plan, name, decode_requests(plan, b, c), b, m)
            step = float(ns_to_ms(df["step_ns"].median()))
            m.decode.append((b, b * (c + plan.decode_tokens // 2), step))
    return m


def _fit_cols(cols: list[int], n: Any, t: Any) -> tuple[float, float, float]:
    """Least squares of t on the chosen columns of [1, n, n^2], each row divided by t (relative errors: a short
    prompt's 2 ms counts as much as a long one's 200 ms); (a, b, c) with the unused ones 0."""
    import numpy as np

    design = np.stack([np.ones_like(n), n, n * n], axis=1)[:, cols] / t[:, None]
    coef, *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    out = [0.0, 0.0, 0.0]
    for k, v in zip(cols, coef):
        out[k] = float(v)
    return out[0], out[1], out[2]


def fit_prefill(samples: list[tuple[int, float]]) -> tuple[float, float, float]:
    """(a, b, c) of t = a + b*n + c*n^2 (ms, n in tokens), all >= 0: the full fit when its coefficients are
    non-negative, else the best of the fits that drop a negative term."""
    import numpy as np

    n = np.array([float(s[0]) for s in samples])
    t = np.array([s[1] for s in samples])
    best: tuple[float, tuple[float, float, float]] | None = None
    for cols in ([0, 1, 2], [0, 2], [0, 1], [1, 2], [2], [1], [0]):
        a, b, c = _fit_cols(cols, n, t)
        if min(a, b, c) < 0:
            continue
        sse = float((((a + b * n + c * n * n) / t - 1) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, (a, b, c))
        if cols == [0, 1, 2]:
            break  # the full fit is admissible: take it
    if best is None:
        raise ConfigError("calibrate: no non-negative prefill fit (no samples?)")
    return best[1]


def _medians(samples: list[tuple[int, int, float]]) -> dict[tuple[int, int], tuple[float, int]]:
    """(x, y) -> (median ms, samples): repeats of one shape reduced to their median."""
    import statistics

    groups: dict[tuple[int, int], list[float]] = {}
    for x, y, t in samples:
        groups.setdefault((x, y), []).append(t)
    return {k: (statistics.median(v), len(v)) for k, v in sorted(groups.items())}


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of a least-squares line; one distinct x: flat through the mean."""
    import numpy as np

    xs = np.array([float(p[0]) for p in points])
    ys = np.array([p[1] for p in points])
    if len(set(xs)) < 2:
        return float(ys.mean()), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def _residual(measured: float, fitted: float) -> float:
    return round((fitted - measured) / measured, 4) if measured > 0 else 0.0


def fit(m: Measured) -> tuple[list[tuple[int, int, int, int, float]], dict[str, Any]]:
    """The profile rows (prefill_tokens, context_tokens, batch, kv_tokens, time_ms) and the fit's report:
    coefficients, and per measured shape its median, the profile's value and the relative residual."""
    cold = {n: v for (n, c), v in _medians(m.prefill).items() if c == 0}
    warm = {k: v for k, v in _medians(m.prefill).items() if k[1] > 0}
    if not cold or not m.decode:
        raise ConfigError("calibrate: need cold prefill and decode measurements")
    a, b, c = fit_prefill([(n, t) for n, (t, _) in cold.items()])

    def p(n: float) -> float:
        return a + b * n + c * n * n

    # attention over cached context: the least-squares slope of the excess over the cold fit per (new x context)
    xy = [(n * ctx, t - p(n)) for (n, ctx), (t, _) in warm.items()]
    q = max(0.0, sum(x * y for x, y in xy) / sum(x * x for x, _ in xy)) if xy else 0.0
    top = max(cold)
    rows = [(n, 0, 0, 0, p(n)) for n in sorted({*cold, 2 * top, 4 * top})]
    rows += [(n, ctx, 0, 0, t) for (n, ctx), (t, _) in warm.items()]
    decode = _medians([(bt, kv, t) for bt, kv, t in m.decode])
    rows += [(0, 0, bt, kv, t) for (bt, kv), (t, _) in decode.items()]
    lines = {bt: _line([(kv, t) for (b2, kv), (t, _) in decode.items() if b2 == bt]) for bt, _ in decode}
    report = {
        "prefill_fit_ms": {"a": a, "b_per_token": b, "c_per_token2": c, "context_slope_per_token2": q},
        "prefill": [
            {"new_tokens": n, "context_tokens": ctx, "samples": k, "measured_ms": round(t, 4),
             "fitted_ms": round(p(n) + q * n * ctx, 4), "residual": _residual(t, p(n) + q * n * ctx)}
            for (n, ctx), (t, k) in sorted({**{(n, 0): v for n, v in cold.items()}, **warm}.items())
        ],
        "decode": [
            {"batch": bt, "kv_tokens": kv, "measured_ms": round(t, 4),
             "fitted_ms": round(lines[bt][0] + lines[bt][1] * kv, 4),
             "residual": _residual(t, lines[bt][0] + lines[bt][1] * kv)}
            for (bt, kv), (t, _) in decode.items()
        ],
    }  # fmt: skip
    return rows, report


def calibrate(plan: CalibrationPlan, out: Path) -> dict[str, Any]:
    """Measure, fit, write the profile CSV at `out` and its report beside it (OUT.calibration.json); the report."""
    import json

    from kvbench.sim.cost.aic import write_profile

    m = measure(plan)
    rows, report = fit(m)
    write_profile(out, rows)
    report |= {
        "target": plan.spec.source,
        "profile": str(out),
        "client_lag_p99_ms": m.lag_p99_ms,
        "runs": m.runs,
        "skipped": m.skipped,
        "max_abs_residual": {
            k: max((abs(r["residual"]) for r in report[k]), default=0.0) for k in ("prefill", "decode")
        },
    }
    report_path(out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def report_path(profile: Path) -> Path:
    return profile.with_name(profile.stem + ".calibration.json")
