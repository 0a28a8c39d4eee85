"""A measured step-time profile (CSV: batch shape -> time) interpolated, so the sim can be calibrated to an engine.

CSV columns (header required): prefill_tokens, context_tokens, batch, kv_tokens, time_ms.
* Prefill rows (batch = 0): time = r(prefill_tokens) + q * pairs, pairs = n*c + n*(n+1)/2 the causal attention
  pairs of n new tokens after c cached ones (the roofline's count): attention grows with the square of the new
  tokens, not only with the cached context. q is the least-squares q >= 0 of time = a + b*n + q*pairs over every
  prefill row (0 with fewer than three distinct rows); r interpolates the context-free rows' residuals
  time - q*pairs linearly (extrapolating the outer segments), so every measured context-free row is reproduced and
  a prompt past the last row keeps growing with its attention.
* Decode rows (prefill_tokens = 0): for each measured batch size b, a least-squares line a_b + s_b * kv_tokens;
  a and s are interpolated linearly in batch between measured sizes (extrapolated outside).
* A mixed step costs prefill(prefill_tokens + batch, context) + s_batch * kv_tokens: the decode tokens ride in the
  same GEMMs as the chunk, and their attention over the running KV is the decode slope.
Memory (capacity, exceeds_hbm) comes from the roofline CostModel of the same model/gpu/tp.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Sequence
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.cost.runs import SHIFT, Lines, S, run_sum, run_within
from kvbench.units import ms_to_ns

COLUMNS = ("prefill_tokens", "context_tokens", "batch", "kv_tokens", "time_ms")


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear through (xs, ys), extrapolating the first/last segment; a single point is constant."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope); one distinct x gives a flat line through the mean."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return my, 0.0
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return my - slope * mx, slope


def _pairs(n: float, c: float) -> float:
    """Causal attention pairs of n new tokens after c cached ones."""
    return n * c + n * (n + 1) / 2


def _solve3(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Solution of a 3x3 linear system (Cramer's rule), None when singular."""

    def det(a: list[list[float]]) -> float:
        return (
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        )

    d = det(m)
    if abs(d) < 1e-12 * max(1.0, max(abs(x) for row in m for x in row)) ** 3:
        return None
    return [det([[v[i] if j == k else m[i][j] for j in range(3)] for i in range(3)]) / d for k in range(3)]


def _pairs_slope(prefill: Sequence[tuple[int, int, float]]) -> float:
    """q >= 0 of the least-squares fit time = a + b*n + q*pairs(n, c) over the prefill rows (0 if undetermined).
    Columns are scaled to unit size first: pairs reach 1e10 where n is 1e5."""
    rows = [(float(n), _pairs(n, c), t) for n, c, t in prefill]
    if len({(n, p) for n, p, _ in rows}) < 3:
        return 0.0
    sn, sp = max(n for n, _, _ in rows), max(p for _, p, _ in rows)
    xs = [(1.0, n / sn, p / sp) for n, p, _ in rows]
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    aty = [sum(x[i] * t for x, (_, _, t) in zip(xs, rows)) for i in range(3)]
    sol = _solve3(ata, aty)
    return max(0.0, sol[2] / sp) if sol else 0.0


def _read_rows(path: Path, where: str) -> list[tuple[int, int, int, int, float]]:
    if not path.is_file():
        raise ConfigError(f"{where}: profile {path}: no such file")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(
                f"{where}: profile {path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}"
            )
        rows = []
        for line, r in enumerate(reader, start=2):
            try:
                p, c, b, k = (int(r[col]) for col in COLUMNS[:4])
                t = float(r["time_ms"])
            except (ValueError, TypeError):
                raise ConfigError(f"{path}:{line}: expected whole numbers and time_ms, got {dict(r)}") from None
            if min(p, c, b, k) < 0 or not t > 0 or (p == 0) == (b == 0):
                raise ConfigError(
                    f"{path}:{line}: need counts >= 0, time_ms > 0 and exactly one of "
                    f"prefill_tokens / batch > 0 (prefill row or decode row)"
                )
            rows.append((p, c, b, k, t))
    return rows


class ProfileCost:
    """Same step-time methods as CostModel, interpolated from a measured profile (see the module docstring)."""

    __slots__ = (
        "roofline",
        "model",
        "gpu",
        "tp",
        "_prefill_tokens",  # prompt lengths of the context-free prefill rows, ascending
        "_prefill_ns",  # their measured times
        "_context_slope",  # ns per attention pair (new token x earlier token)
        "_decode_batches",  # measured decode batch sizes, ascending
        "_decode_base",  # per batch size: ns of a step at zero KV (the line's intercept)
        "_decode_slope",  # per batch size: ns per KV token in the batch
    )

    def __init__(
        self,
        roofline: CostModel,
        prefill: Sequence[tuple[int, int, float]],
        decode: Sequence[tuple[int, int, float]],
        where: str,
    ) -> None:
        self.roofline, self.model, self.gpu, self.tp = roofline, roofline.model, roofline.gpu, roofline.tp
        base = sorted((n, t) for n, c, t in prefill if c == 0)
        if not base or not decode:
            raise ConfigError(f"{where}: profile needs prefill rows with context_tokens = 0 and decode rows")
        q = self._context_slope = _pairs_slope(prefill)
        self._prefill_tokens = [float(n) for n, _ in base]
        self._prefill_ns = [t - q * _pairs(n, 0) for n, t in base]
        by_batch: dict[int, list[tuple[float, float]]] = {}
        for b, k, t in decode:
            by_batch.setdefault(b, []).append((k, t))
        self._decode_batches = [float(b) for b in sorted(by_batch)]
        fits = [_line(by_batch[b]) for b in sorted(by_batch)]
        self._decode_base, self._decode_slope = [a for a, _ in fits], [s for _, s in fits]

    @classmethod
    def load(cls, path: str | Path, roofline: CostModel, where: str) -> ProfileCost:
        rows = _read_rows(Path(path), where)
        prefill = [(p, c, ms_to_ns(t)) for p, c, b, k, t in rows if b == 0]
        decode = [(b, k, ms_to_ns(t)) for p, c, b, k, t in rows if p == 0]
        return cls(roofline, prefill, decode, where)

    def _decode_coef(self, batch: int) -> tuple[int, int]:
        """Fixed-point (intercept, slope per KV token) of a decode step of `batch`; every step costs >= 1 ns."""
        a = _interp(self._decode_batches, self._decode_base, batch)
        s = _interp(self._decode_batches, self._decode_slope, batch)
        return max(S, round(a * S)), max(0, round(s * S))

    def prefill_ns(self, new_tokens: int, context_tokens: int = 0) -> int:
        if new_tokens <= 0:
            return 0
        t = _interp(self._prefill_tokens, self._prefill_ns, new_tokens)
        return max(1, round(t + self._context_slope * _pairs(new_tokens, context_tokens)))

    def decode_step_ns(self, batch: int, kv_tokens: int) -> int:
        if batch <= 0:
            return 0
        a, s = self._decode_coef(batch)
        return (a + s * kv_tokens) >> SHIFT

    def step_ns(self, prefill_tokens: int, prefill_context: int, batch: int, kv_tokens: int) -> int:
        if prefill_tokens <= 0:
            return self.decode_step_ns(batch, kv_tokens)
        slope = self._decode_coef(batch)[1] if batch > 0 else 0
        return self.prefill_ns(prefill_tokens + batch, prefill_context) + (slope * kv_tokens >> SHIFT)

    def decode_lines(self, batch: int, kv_tokens: int, q: int = 1, growth: int | None = None) -> Lines:
        """The run as `lines` (kvbench.sim.cost.runs.run_sum): one line, a + s*(kv_tokens + growth*i). A verify step
        of q tokens per request costs like a decode step of batch*q requests (the GEMMs) with the KV slope of
        `batch` requests (each reads its context once)."""
        a = self._decode_coef(batch * q)[0]
        s = self._decode_coef(batch)[1]
        a0, slope = a + s * kv_tokens, s * (batch if growth is None else growth)
        return a0, slope, a0, slope, 0

    def decode_run_ns(self, batch: int, kv_tokens: int, n_steps: int) -> int:
        if batch <= 0 or n_steps <= 0:
            return 0
        return run_sum(n_steps, self.decode_lines(batch, kv_tokens))

    def decode_steps_within(self, batch: int, kv_tokens: int, budget_ns: int) -> int:
        if batch <= 0:
            return 0
        return run_within(budget_ns, self.decode_lines(batch, kv_tokens))

    def kv_capacity_tokens(self) -> int:
        return self.roofline.kv_capacity_tokens()

    def exceeds_hbm(self) -> bool:
        return self.roofline.exceeds_hbm()
