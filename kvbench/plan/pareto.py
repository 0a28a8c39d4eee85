"""Pareto fronts and the ranking of a plan's candidates: goodput per GPU (or per dollar-hour, in a priced plan)
against a per-user figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbench.plan.prices import PER_GPU


def front(xs: Sequence[float | None], ys: Sequence[float | None], y_higher: bool) -> list[bool]:
    """Which points are on the Pareto front of higher x and higher (or lower) y: no other point is at least as good
    in both and better in one. Points missing either figure are not on it."""
    pts = [(x, y if y_higher else -y) if x is not None and y is not None else None for x, y in zip(xs, ys)]
    out = []
    for i, p in enumerate(pts):
        if p is None:
            out.append(False)
            continue
        beaten = any(q is not None and q[0] >= p[0] and q[1] >= p[1] and q != p for j, q in enumerate(pts) if j != i)
        out.append(not beaten)
    return out


def rank_key(row: dict[str, Any], by: str = PER_GPU) -> tuple[int, float, float, float, str]:
    """Deeper rungs first (their figures come from longer replays), then goodput per GPU (or the column `by`: per
    dollar-hour in a priced plan); searches of the same precision often tie on it, so then the attainment at that
    rate (more headroom), then the lower TTFT p90, then the name, so a full tie ranks the same whichever search ended
    first."""
    per_gpu = row.get(by)
    attainment = row.get("slo_attainment")
    ttft = row.get("ttft_ms.p90")
    return (
        -int(row.get("rung", -1)),
        -(per_gpu if per_gpu is not None else -1.0),
        -(attainment if attainment is not None else -1.0),
        ttft if ttft is not None else float("inf"),
        str(row.get("candidate", "")),
    )


def mark_fronts(rows: list[dict[str, Any]], by: str = PER_GPU) -> None:
    """Add pareto_ttft (goodput/GPU, or the column `by`, vs TTFT p90) and pareto_user (the same vs one user's
    tokens/s) to rows, compared only with rows of the same rung (figures from replays of the same length)."""
    for rung in {r.get("rung") for r in rows}:
        group = [r for r in rows if r.get("rung") == rung and r.get("status") == "complete"]
        xs = [r.get(by) for r in group]
        for key, ykey, higher in (("pareto_ttft", "ttft_ms.p90", False), ("pareto_user", "user_tokens_per_s", True)):
            for r, on in zip(group, front(xs, [r.get(ykey) for r in group], higher)):
                r[key] = on
    for r in rows:
        r.setdefault("pareto_ttft", False)
        r.setdefault("pareto_user", False)
