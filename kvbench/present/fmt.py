"""Numbers as text for every table, report, figure and message: one `number` function and the house styles by name.

A style picks a format spec by magnitude (small values to significant digits or decimals, large ones as whole
numbers with thousands separators) and says what a missing value (None, NaN) reads as.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

DASH = "—"  # no value: terminal tables, compare, gate
EN_DASH = "–"  # no value: the report


@dataclass(frozen=True)
class Style:
    """`spec` below `switch` (by magnitude), `large` at or above it; Python ints get `ints` when it is set."""

    spec: str
    large: str | None = None
    switch: float = math.inf
    ints: str | None = None
    missing: str = DASH


TABLE = Style(",.3f", ",.1f", 1000, ints=",")  # terminal tables: three decimals, one from 1,000 on
DECIMALS = Style(",.3f", ints=",")  # terminal text: three decimals at any size
REPORT = Style(",.4g", ",.0f", 1e3, missing=EN_DASH)  # report: four significant digits, whole from 1,000 on
REPORT_DELTA = Style("+.4g", "+,.0f", 1e3, missing=EN_DASH)  # report: a signed difference
REPORT_COUNT_DELTA = Style("+,.0f", missing=EN_DASH)  # report: a signed difference of counts
COMPARE = Style(",.4g", ",.0f", 1e5)  # compare: four significant digits, whole from 100,000 on
EXACT = Style(".6g")  # gate: six significant digits
BRIEF = Style(".4g", missing=EN_DASH)  # rates in the report's goodput tables and figure labels
TICK = Style(".3g", ",.0f", 1000)  # figure axes
MARK = Style(",.6g")  # figure colour-bar marks
ONE_DECIMAL = Style(".1f")  # a millisecond figure in a warning
SHORT = Style("g")  # limits and thresholds the user gave, as short as exact: 200.0 -> 200


def number(v: Any, style: Style = TABLE) -> str:
    """`v` written in `style`; None and NaN as style.missing, anything not a number as its str()."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return style.missing
    if isinstance(v, bool) or not isinstance(v, Real):
        return str(v)
    if style.ints is not None and isinstance(v, int):
        return format(v, style.ints)
    spec = style.large if style.large is not None and abs(float(v)) >= style.switch else style.spec
    return format(v, spec)


def count(n: Any, missing: str = DASH) -> str:
    """A whole number with thousands separators: 12,345."""
    return missing if n is None else f"{int(n):,}"


def percent(v: Any, places: int = 2, signed: bool = False, missing: str = DASH) -> str:
    """A ratio as a percentage: 0.1234 -> '12.34 %' ('+12.3 %' signed with one place)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    return f"{v * 100:{'+' if signed else ''}.{places}f} %"


def points(d: float) -> str:
    """A difference of two ratios in percentage points: 0.05 -> '+5.00 pp'."""
    return f"{d * 100:+.2f} pp"


def change(rel: float) -> str:
    """A relative difference: 0.267 -> '+26.7%'."""
    return f"{rel:+.1%}"


def share(v: float) -> str:
    """A fraction as a whole percentage: 0.9 -> '90%' (targets, interval levels)."""
    return f"{v:.0%}"


def short(v: Any) -> str:
    """A limit or threshold the user gave, as short as exact: 200.0 -> '200', 0.5 -> '0.5'."""
    return number(v, SHORT)


def signed(v: float) -> str:
    """A difference in whole units with its sign and a true minus: '+3', '−12', '+2.5' (one decimal if not whole)."""
    text = f"{int(v):+,}" if float(v).is_integer() else f"{v:+,.1f}"
    return text.replace("-", "−")


def limits(thresholds: Mapping[str, float], le: str = "≤", unit: str = "") -> str:
    """SLO thresholds as 'ttft≤200, tpot≤50' (unit appended to each value, e.g. ' ms'); '' when there are none."""
    return ", ".join(f"{k}{le}{short(v)}{unit}" for k, v in thresholds.items())


def nbytes(n: Any, missing: str = DASH) -> str:
    """A byte count in decimal units, three significant digits: 187,899,576,320 -> '188 GB'."""
    if n is None:
        return missing
    v = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(v) < 999.5:
            return f"{v:.3g} {unit}" if unit != "B" else f"{int(v):,} B"
        v /= 1000
    return f"{v:.3g} PB"
