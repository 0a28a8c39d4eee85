"""The metric catalogue: one row per figure of a run (key, label, unit, better direction, the SQL that makes it).

Every list of metrics in kvbench is derived from CATALOGUE: the keys of summary.json (analysis/figures.py reads
each row's SQL file and column), the bootstrap samples, the gate's known keys and default directions, compare's
headline table, the report's summary table and the terminal tables. Adding a metric is a row here plus the SQL
that computes it (docs/adding-a-metric.md). Rows are in reading order: tables list metrics in this order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Direction(StrEnum):
    """Which way a metric is better. NEITHER: a property of the workload or a plain volume; a gate rule on it
    fails on a change either way beyond its tolerance."""

    HIGHER = "higher"
    LOWER = "lower"
    NEITHER = "neither"


class Shape(StrEnum):
    """How a metric's values come out of its SQL file."""

    SCALAR = "scalar"  # one row per run; the value is `column`
    PER_ROW = "per_row"  # one value per row; `key` is a pattern filled from the row's columns, e.g. {instance}
    QUANTILES = "quantiles"  # a distribution: columns <column>_count, _mean, _q (the PERCENTILES list), _max
    POOLED = "pooled"  # a distribution of `column` values weighted by column n (one row per distinct value)


class Display(StrEnum):
    """How tables write a value: a count, a number, or a ratio as a percentage."""

    INT = "int"
    NUM = "num"
    PCT = "pct"


PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
STATS = ("count", "mean", *(name for name, _ in PERCENTILES), "max")  # a distribution's keys: ttft_ms.p99, ...
FINISHED = "status = 'FINISH'"
# what a placeholder of a PER_ROW key may hold (instance and tier names are the user's: anything)
PLACEHOLDERS = {"instance": ".+", "tier": ".+", "status": "[A-Z]+", "reason": ".+"}


@dataclass(frozen=True)
class Metric:
    """One catalogue row. Units: the SQL column's unit is its suffix (`_ns`, `_per_ns`, none), `unit` the unit in
    summary.json; figures.py converts between them through kvbench/units.py."""

    key: str  # summary.json key; a distribution's prefix (ttft_ms -> ttft_ms.p99); a PER_ROW pattern
    label: str  # what tables call it
    unit: str  # unit of the value in summary.json: ms, s, req/s, tok/s, requests, tokens, ... ("" dimensionless)
    direction: Direction
    sql: str  # the file kvbench/analysis/sql/<sql>.sql that computes it
    column: str  # the column read from that file's result (see Shape)
    shape: Shape = Shape.SCALAR
    display: Display = Display.NUM  # INT: a count, also 0 (not None) when there is nothing to count
    headline: bool | tuple[str, ...] = False  # in compare's default table (a distribution: these statistics)
    report: bool | tuple[str, ...] = False  # in the report's summary table (a distribution: these statistics)
    sample: tuple[str, str] | None = None  # bootstrap: (SQL expression, filter) over per_request, in `unit`'s ns
    zero: bool = False  # NULL or no row means 0 (a sum), not "no value"
    uses_slo: bool = False  # depends on the SLO thresholds: compared only between sides with the same SLOs
    note: str = ""  # said after the label in the terminal's latency table

    @property
    def distribution(self) -> bool:
        return self.shape in (Shape.QUANTILES, Shape.POOLED)

    def keys(self, which: bool | tuple[str, ...] = True) -> list[str]:
        """The summary keys of this row (all, or the statistics `which` names); none for a PER_ROW pattern."""
        if self.shape is Shape.PER_ROW or not which:
            return []
        if not self.distribution:
            return [self.key]
        return [f"{self.key}.{s}" for s in (STATS if isinstance(which, bool) else which)]

    def title(self, stat: str | None = None) -> str:
        """A table row's name: 'TTFT p99 (ms)', 'duration (s)', 'errors' (counts and ratios name no unit)."""
        name = f"{self.label} {stat}" if stat else self.label
        return f"{name} ({self.unit})" if self.display is Display.NUM and self.unit else name

    def pattern(self) -> re.Pattern[str]:
        """A PER_ROW key as a regular expression with one named group per placeholder."""
        parts = re.split(r"\{(\w+)\}", self.key)
        return re.compile(
            "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{PLACEHOLDERS[p]})" for i, p in enumerate(parts))
        )


HIGHER, LOWER, NEITHER = Direction.HIGHER, Direction.LOWER, Direction.NEITHER
INT, PCT = Display.INT, Display.PCT
PER_ROW = Shape.PER_ROW
MEAN_P50_P99, ALL4 = ("mean", "p50", "p99"), ("mean", "p50", "p90", "p99")


def _latency(
    key: str, label: str, column: str, headline: tuple[str, ...], report: tuple[str, ...], note: str = ""
) -> Metric:
    """A per-request latency over finished requests (latency.sql), with its bootstrap sample."""
    sample = (column, FINISHED)
    return Metric(
        key,
        label,
        "ms",
        LOWER,
        "latency",
        column,
        Shape.QUANTILES,
        headline=headline,
        report=report,
        sample=sample,
        note=note,
    )


# fmt: off
CATALOGUE: tuple[Metric, ...] = (
    # requests and how they ended (run_totals.sql)
    Metric("requests", "requests", "requests", NEITHER, "run_totals", "requests", display=INT, report=True),
    Metric("finished", "finished", "requests", HIGHER, "run_totals", "finished", display=INT, report=True),
    Metric("errors", "errors", "requests", LOWER, "run_totals", "errors", display=INT, headline=True, report=True),
    Metric("rejected", "rejected", "requests", LOWER, "run_totals", "rejected", display=INT, headline=True,
           report=True),
    Metric("cancelled", "cancelled", "requests", LOWER, "run_totals", "cancelled", display=INT, report=True),
    Metric("running", "still running at the end", "requests", LOWER, "run_totals", "running", display=INT,
           headline=True, report=True),
    Metric("good", "good requests", "requests", HIGHER, "run_totals", "good", display=INT, uses_slo=True),
    Metric("one_token", "finished with one output token", "requests", LOWER, "run_totals", "one_token",
           display=INT),
    Metric("input_tokens", "input tokens of finished requests", "tokens", NEITHER, "run_totals", "input_tokens",
           display=INT),
    Metric("output_tokens", "output tokens of finished requests", "tokens", NEITHER, "run_totals",
           "output_tokens", display=INT),
    # time and rates (run_totals.sql)
    Metric("duration_s", "duration", "s", NEITHER, "run_totals", "duration_ns", zero=True, report=True),
    Metric("request_throughput", "request throughput", "req/s", HIGHER, "run_totals", "finished_per_ns",
           headline=True, report=True),
    Metric("output_token_throughput", "output token throughput", "tok/s", HIGHER, "run_totals",
           "output_tokens_per_ns", headline=True, report=True),
    Metric("total_token_throughput", "total token throughput", "tok/s", HIGHER, "run_totals",
           "total_tokens_per_ns"),
    Metric("goodput", "goodput", "good req/s", HIGHER, "run_totals", "good_per_ns", headline=True, report=True,
           uses_slo=True),
    Metric("slo_attainment", "SLO attainment", "", HIGHER, "run_totals", "slo_attainment", display=PCT,
           headline=True, report=True, sample=("good::DOUBLE", "NOT interrupted_unsent"), uses_slo=True),
    # each SLO on its own (slo_parts.sql): which one a run fails, e.g. in goodput.csv
    Metric("finished_ratio", "finished share", "", HIGHER, "slo_parts", "finished_ratio", display=PCT),
    Metric("ttft_attainment", "SLO attainment, TTFT", "", HIGHER, "slo_parts", "ttft_attainment", display=PCT,
           uses_slo=True),
    Metric("tpot_attainment", "SLO attainment, TPOT", "", HIGHER, "slo_parts", "tpot_attainment", display=PCT,
           uses_slo=True),
    Metric("e2el_attainment", "SLO attainment, E2E", "", HIGHER, "slo_parts", "e2el_attainment", display=PCT,
           uses_slo=True),
    Metric("tbt_attainment", "SLO attainment, TBT", "", HIGHER, "slo_parts", "tbt_attainment", display=PCT,
           uses_slo=True),
    # arrival rates (arrivals.sql): what the run delivered, and what its schedule offered (they differ on session
    # workloads, whose later turns wait for answers): facts of the load, better neither way
    Metric("arrival_rate", "arrival rate, achieved", "req/s", NEITHER, "arrivals", "arrived_per_ns", report=True),
    Metric("scheduled_rate", "arrival rate, scheduled", "req/s", NEITHER, "arrivals", "scheduled_per_ns",
           report=True),
    # latency distributions over finished requests (latency.sql; ITL pooled over their gaps, itl.sql)
    _latency("ttft_ms", "TTFT", "ttft_ns", MEAN_P50_P99, ALL4),
    _latency("tpot_ms", "TPOT", "tpot_ns", MEAN_P50_P99, ALL4),
    Metric("itl_ms", "ITL", "ms", LOWER, "itl", "gap_ns", Shape.POOLED, headline=("p50", "p99"), report=ALL4),
    _latency("e2e_ms", "E2E", "e2e_ns", ("mean", "p99"), ALL4),
    _latency("tbt_ms", "TBT", "tbt_ns", ("p99",), ("p99",), note="Mooncake"),
    _latency("client_lag_ms", "client lag", "lag_ns", ("p99",), ("p99",)),
    _latency("queue_ms", "queueing", "queue_ns", (), ("p99",), note="sim"),
    # prefix cache (run_totals.sql): what the target achieved, and what the trace implies (a fact of the workload,
    # not of the system under test: better neither way)
    Metric("prefix_hit_ratio", "prefix hit ratio, achieved", "", HIGHER, "run_totals", "prefix_hit_ratio",
           display=PCT, headline=True, report=True),
    Metric("trace_hit_ratio", "prefix hit ratio, trace-implied", "", NEITHER, "run_totals", "trace_hit_ratio",
           display=PCT, headline=True, report=True),
    # achieved vs intended prompt length (input_len.sql; real endpoints that report usage)
    Metric("input_len_ratio", "input length, achieved / intended", "", NEITHER, "input_len", "ratio",
           report=True),
    Metric("input_len_delta.count", "input length, requests compared", "requests", NEITHER, "input_len", "count",
           display=INT),
    Metric("input_len_delta.p50", "input length, achieved − intended p50", "tokens", NEITHER, "input_len",
           "delta_p50", report=True),
    Metric("input_len_delta.min", "input length, achieved − intended min", "tokens", NEITHER, "input_len",
           "delta_min"),
    Metric("input_len_delta.max", "input length, achieved − intended max", "tokens", NEITHER, "input_len",
           "delta_max"),
    # KV transfers (kv_totals.sql over the kv_transfers table)
    Metric("kv_transfer.count", "KV transfers", "transfers", NEITHER, "kv_totals", "transfers", display=INT,
           report=True),
    Metric("kv_transfer.bytes", "KV transfer bytes", "bytes", NEITHER, "kv_totals", "nbytes", display=INT),
    Metric("kv_transfer.time_s", "KV transfer time", "s", LOWER, "kv_totals", "duration_ns", zero=True),
    Metric("kv_transfer.mean_ms", "KV transfer mean", "ms", LOWER, "kv_totals", "mean_ns", report=True),
    Metric("kv_transfer.ttft_share", "KV transfer share of TTFT", "", LOWER, "kv_totals", "ttft_share",
           display=PCT, report=True),
    # scheduling (run_totals.sql)
    Metric("preemptions", "preemptions", "preemptions", LOWER, "run_totals", "preemptions", display=INT,
           report=True),
    Metric("preempted", "preempted requests", "requests", LOWER, "run_totals", "preempted", display=INT),
    Metric("migrations", "migrations", "migrations", LOWER, "run_totals", "migrations", display=INT),
    # one figure per status and reason, tier or instance
    Metric("failures.{status}.{reason}", "failures", "requests", LOWER, "reasons", "requests", PER_ROW, INT),
    Metric("prefix_hit_ratio.tier.{tier}", "hits by tier", "", HIGHER, "cache_tiers", "hit_ratio", PER_ROW, PCT),
    Metric("instance.{instance}.steps", "steps", "steps", NEITHER, "instance_totals", "steps", PER_ROW, INT),
    Metric("instance.{instance}.utilisation", "utilisation", "", NEITHER, "instance_totals", "utilisation",
           PER_ROW),
    Metric("instance.{instance}.batch", "mean batch", "requests", NEITHER, "instance_totals", "batch", PER_ROW),
    Metric("instance.{instance}.kv_occupancy", "KV occ. mean", "", NEITHER, "instance_totals", "kv_occupancy",
           PER_ROW),
    Metric("instance.{instance}.kv_occupancy_max", "KV occ. max", "", LOWER, "instance_totals",
           "kv_occupancy_max", PER_ROW),
    Metric("prefix_hit_ratio.instance.{instance}", "prefix hit ratio", "", HIGHER, "cache_instances", "hit_ratio",
           PER_ROW, PCT),
    Metric("trace_hit_ratio.instance.{instance}", "trace-implied", "", NEITHER, "cache_instances",
           "trace_hit_ratio", PER_ROW, PCT),
)
# fmt: on

# The functions below read CATALOGUE when called: every consumer sees the same table, rows added included.


def by_key(key: str) -> Metric:
    """The row whose key (or pattern) is `key`."""
    return next(m for m in CATALOGUE if m.key == key)


def distributions() -> list[Metric]:
    return [m for m in CATALOGUE if m.distribution]


def per_row() -> list[Metric]:
    return [m for m in CATALOGUE if m.shape is Shape.PER_ROW]


def fixed_keys() -> list[str]:
    """The keys every summary.json has, in catalogue order (PER_ROW keys depend on the run)."""
    return [k for m in CATALOGUE for k in m.keys()]


def headline_keys() -> list[str]:
    """compare's default rows."""
    return [k for m in CATALOGUE for k in m.keys(m.headline)]


def report_rows() -> list[tuple[str, Metric, str | None]]:
    """The report's summary rows: (summary key, its metric, statistic or None)."""
    return [
        (k, m, k.removeprefix(f"{m.key}.") if m.distribution else None) for m in CATALOGUE for k in m.keys(m.report)
    ]


def samples() -> dict[str, Metric]:
    """Metrics with per-request bootstrap samples, by summary key prefix (summary.json "samples")."""
    return {m.key: m for m in CATALOGUE if m.sample}


def lookup(key: str) -> tuple[Metric, dict[str, str]] | None:
    """The catalogue row a summary key belongs to, and the placeholders of a PER_ROW key; None: not a metric."""
    for m in CATALOGUE:
        if key in m.keys():
            return m, {}
    for m in per_row():
        match = m.pattern().fullmatch(key)
        if match:
            return m, match.groupdict()
    return None


def is_known(key: str) -> bool:
    return lookup(key) is not None


def direction_of(key: str) -> Direction:
    """Which way `key` is better. A distribution's count is a sample size, better neither way."""
    found = lookup(key)
    if found is None:
        raise KeyError(key)
    m = found[0]
    return Direction.NEITHER if m.distribution and key.endswith(".count") else m.direction


def uses_slo(key: str) -> bool:
    found = lookup(key)
    return found is not None and found[0].uses_slo
