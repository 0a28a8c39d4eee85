"""The flat figure dict of one run (what summary.json holds): each catalogue row read from its SQL file's result."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis import catalogue
from kvbench.analysis.catalogue import PERCENTILES, STATS, Display, Metric, Shape
from kvbench.analysis.runset import open_runs
from kvbench.analysis.slo import Slo
from kvbench.analysis.sqlfiles import execute, records
from kvbench.analysis.tables import prepare
from kvbench.units import NS_PER_S, ns_to_ms, ns_to_s

if TYPE_CHECKING:
    import duckdb
    import numpy

TOTALS = "run_totals"  # read first: its columns (run, duration_ns, ...) are the $parameters of the other files


def weighted_quantiles(values: numpy.ndarray, weights: numpy.ndarray, ps: list[float]) -> list[float]:
    """Quantiles of `values` (sorted ascending) each repeated `weights` times, with numpy's linear method:
    equal to numpy.quantile(numpy.repeat(values, weights), ps) without building the repeated array."""
    import numpy as np

    cum = np.cumsum(weights)
    h = np.asarray(ps) * (cum[-1] - 1)
    lo, hi = np.floor(h), np.ceil(h)
    v_lo = values[np.searchsorted(cum, lo, side="right")]
    v_hi = values[np.searchsorted(cum, hi, side="right")]
    return list(v_lo + (h - lo) * (v_hi - v_lo))


def convert(m: Metric, column: str, value: Any) -> Any:
    """A SQL value in summary.json's unit: the column's suffix says its unit (_ns, _per_ns), m.unit the target."""
    if value is None:
        if not (m.zero or m.display is Display.INT):
            return None
        value = 0
    if m.display is Display.INT:
        return int(value)
    if column.endswith("_per_ns"):
        return value * NS_PER_S
    if column.endswith("_ns"):
        return ns_to_s(value) if m.unit == "s" else ns_to_ms(value)
    return value


def _quantiles(m: Metric, row: dict[str, Any]) -> dict[str, Any]:
    """A QUANTILES row's statistics: <column>_count, _mean, _q (one per PERCENTILES), _max."""
    c = m.column
    q = row.get(f"{c}_q") or [None] * len(PERCENTILES)
    values = [row.get(f"{c}_count") or 0, row.get(f"{c}_mean"), *q, row.get(f"{c}_max")]
    return {f"{m.key}.{s}": v if s == "count" or v is None else convert(m, c, v) for s, v in zip(STATS, values)}


def _pooled(con: duckdb.DuckDBPyConnection, m: Metric, bound: dict[str, Any]) -> dict[str, Any]:
    """A POOLED distribution: rows (column, n) sorted by column, each value counted n times."""
    data = execute(con, m.sql, bound).fetchnumpy()
    values, weights = data[m.column], data["n"]
    n = int(weights.sum()) if len(weights) else 0
    out: dict[str, Any] = {f"{m.key}.count": n}
    if not n:
        return out | {f"{m.key}.{s}": None for s in STATS[1:]}
    out[f"{m.key}.mean"] = convert(m, m.column, float((values * weights).sum() / n))
    qs = weighted_quantiles(values, weights, [p for _, p in PERCENTILES])
    out.update({f"{m.key}.{name}": convert(m, m.column, float(q)) for (name, _), q in zip(PERCENTILES, qs)})
    out[f"{m.key}.max"] = convert(m, m.column, float(values[-1]))
    return out


def _from_rows(metrics: list[Metric], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of SCALAR, PER_ROW and QUANTILES rows of one SQL file, row by row."""
    out: dict[str, Any] = {}
    for row in rows or [{}]:  # no row: counts 0, the rest None
        for m in metrics:
            if m.shape is Shape.PER_ROW:
                if row:
                    out[m.key.format(**row)] = convert(m, m.column, row[m.column])
            elif m.shape is Shape.QUANTILES:
                out.update(_quantiles(m, row))
            else:
                out[m.key] = convert(m, m.column, row.get(m.column))
    return out


def by_source() -> dict[str, list[Metric]]:
    """Catalogue rows grouped by SQL file, run_totals first, then in catalogue order."""
    groups: dict[str, list[Metric]] = {TOTALS: []}
    for m in catalogue.CATALOGUE:
        groups.setdefault(m.sql, []).append(m)
    return groups


def figures(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> dict[str, Any]:
    """All figures of the single run open on `con` (see each SQL file's header for its formulas)."""
    prepare(con, slo, transfers=True)
    out: dict[str, Any] = {}
    bound: dict[str, Any] = {"percentiles": [p for _, p in PERCENTILES]}
    for source, metrics in by_source().items():
        for m in (m for m in metrics if m.shape is Shape.POOLED):
            out.update(_pooled(con, m, bound))
        metrics = [m for m in metrics if m.shape is not Shape.POOLED]
        if not metrics:
            continue
        rows = records(con, source, bound)
        if source == TOTALS:
            bound |= rows[0] if rows else {"run": None, "duration_ns": 0}
        out.update(_from_rows(metrics, rows))
    return {k: (float(v) if isinstance(v, float) else v) for k, v in out.items()}


def summary(run_dir: str | Path, slo: Slo | None = None) -> dict[str, Any]:
    """The figures of one run as a flat dict with stable keys ("ttft_ms.p99", "slo_attainment", ...)."""
    con = open_runs([run_dir])
    try:
        return figures(con, slo)
    finally:
        con.close()
