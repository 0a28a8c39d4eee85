"""A run's nominal arrival rate (what it was asked for) beside the rate it achieved (arrivals.sql), and their gap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RATE_TOLERANCE = 0.05  # achieved vs nominal beyond this (relative) is warned about
NOMINAL_KEYS = ("nominal_rate_per_s", "rate_per_s")  # run.json workload.shaping: set by a probe or sweep, --rate


@dataclass(frozen=True)
class Rates:
    """Arrival rates of one run in requests/s. `source`: "asked" (--rate, a goodput probe or a sweep point set
    it, run.json) or "schedule" (the workload's own: session starts' rate x requests per start)."""

    achieved: float | None
    nominal: float | None
    scheduled: float | None
    source: str

    @property
    def gap(self) -> float | None:
        """achieved / nominal - 1 (-0.66: a third of the nominal rate arrived); None when either is unknown."""
        if self.achieved is None or not self.nominal:
            return None
        return self.achieved / self.nominal - 1

    @property
    def off(self) -> bool:
        return self.gap is not None and abs(self.gap) > RATE_TOLERANCE


def rates_of(manifest: dict[str, Any], metrics: dict[str, Any]) -> Rates:
    """The rates of a run from its run.json and its figures (arrival_rate, scheduled_rate)."""
    shaping = (manifest.get("workload") or {}).get("shaping") or {}
    asked = next((shaping[k] for k in NOMINAL_KEYS if isinstance(shaping.get(k), (int, float))), None)
    scheduled = metrics.get("scheduled_rate")
    nominal, source = (float(asked), "asked") if asked is not None else (scheduled, "schedule")
    return Rates(metrics.get("arrival_rate"), nominal, scheduled, source)


def rate_warning(r: Rates) -> str | None:
    """One line when the achieved rate is more than RATE_TOLERANCE from the nominal one, else None."""
    if not r.off or r.gap is None or r.achieved is None or r.nominal is None:
        return None
    side = "below" if r.gap < 0 else "above"
    text = f"achieved arrival rate {r.achieved:.4g} req/s is {abs(r.gap):.0%} {side} the nominal {r.nominal:.4g} req/s"
    if not r.scheduled:
        return text
    if abs(r.achieved / r.scheduled - 1) > RATE_TOLERANCE:
        return f"{text} (later session turns wait for the answer to the previous turn and a think time)"
    return f"{text} (the schedule itself offered {r.scheduled:.4g} req/s)"
