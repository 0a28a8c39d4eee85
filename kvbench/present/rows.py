"""The report's summary table: the catalogue's report metrics across runs, per-GPU rates, and deltas to the base."""

from __future__ import annotations

from typing import Any, NamedTuple

from kvbench.analysis.catalogue import Direction, Display, direction_of, report_rows
from kvbench.present import fmt

PER_GPU = ("request_throughput", "output_token_throughput", "goodput")  # totals shown again divided by GPUs


def fmt_value(value: Any, display: Display) -> str:
    """A summary figure as text: counts with separators, ratios as %, the rest to 4 significant digits."""
    if display is Display.INT and value is not None and value == value:
        return fmt.count(value)
    if display is Display.PCT:
        return fmt.percent(value, missing=fmt.EN_DASH)
    return fmt.number(value, fmt.REPORT)


class Row(NamedTuple):
    """One metric of the summary table across runs."""

    key: str
    label: str
    values: list[str]  # formatted, one per run
    direction: Direction
    raw: list
    display: Display


def _per_gpu(value: Any, gpus: int | None) -> float | None:
    return None if value is None or not gpus else value / gpus


def summary_rows(summaries: list[dict], gpus: list[int | None] | None = None) -> list[Row]:
    """A Row for every catalogue metric shown in the report that some run has a value for; after each total of
    PER_GPU, the same per GPU when some run's GPU count is known (run.json's target)."""
    gpus = gpus or [None] * len(summaries)
    out = []
    for key, metric, stat in report_rows():
        raw = [s.get(key) for s in summaries]
        if all(v is None for v in raw):
            continue
        values = [fmt_value(v, metric.display) for v in raw]
        out.append(Row(key, metric.title(stat), values, direction_of(key), raw, metric.display))
        if key in PER_GPU and any(gpus):
            per = [_per_gpu(v, g) for v, g in zip(raw, gpus)]
            label = metric.title(stat).replace(" (", " per GPU (", 1)
            out.append(
                Row(
                    f"{key}_per_gpu",
                    label,
                    [fmt_value(v, Display.NUM) for v in per],
                    direction_of(key),
                    per,
                    Display.NUM,
                )
            )
    return out


def delta(base: Any, value: Any, direction: Direction, display: Display = Display.NUM) -> tuple[str, str]:
    """(text, css class) of value - base: '+1,234 (+12.3%)' (ratios: '+1.50 pp'), better/worse/same by direction."""
    if base is None or value is None or base != base or value != value:
        return fmt.EN_DASH, "same"
    d = value - base
    if display is Display.PCT:
        text = fmt.points(d)
    else:
        text = fmt.number(d, fmt.REPORT_COUNT_DELTA if display is Display.INT else fmt.REPORT_DELTA)
        text += f" ({fmt.change(d / abs(base))})" if base else ""
    if d == 0 or direction is Direction.NEITHER:
        return text, "same"
    return text, "better" if (d > 0) == (direction is Direction.HIGHER) else "worse"
