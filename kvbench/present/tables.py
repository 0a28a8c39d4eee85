"""The report's tables as plain text cells (runs, summary, comparison with CIs, goodput, failures), for any format.

Cells hold unescaped text: the templates escape them (HTML) or the Markdown filter does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.analysis.bootstrap import LEVEL
from kvbench.analysis.rates import rates_of
from kvbench.plan.goodput import goodput_of
from kvbench.present import fmt
from kvbench.present.deploy import deployment
from kvbench.present.rows import Row, delta
from kvbench.workload.tokens import tokens_label

if TYPE_CHECKING:
    from kvbench.present.collect import RunData
    from kvbench.present.compare import Delta

NO_CHANGE = "no significant change"


@dataclass(frozen=True)
class Cell:
    """Text with an optional CSS class (better/worse/same/mono), colour swatch, and a second line (the CI)."""

    text: str
    cls: str = ""
    swatch: str | None = None
    ci: str = ""
    mark: str = ""  # Markdown's flag: ✅ / ❌


@dataclass(frozen=True)
class Table:
    head: list[Any]  # str or Cell
    rows: list[list[Any]]
    num_from: int = 1  # columns from here on are right-aligned numbers


@dataclass(frozen=True)
class Section:
    """One figure of the report: its image (a data: URI) or, when the runs hold no data for it, a note saying why."""

    key: str
    title: str
    caption: str
    src: str | None = None  # the image as a data: URI
    note: str = ""


@dataclass(frozen=True)
class Part:
    """One section of the report: tables, figures and a note, under a title."""

    key: str
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: Sequence[Section] = ()
    note: str = ""
    intro: str = ""


def hex_colour(colour: Sequence[float]) -> str:
    r, g, b = (int(round(c * 255)) for c in colour[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _target(m: dict[str, Any]) -> str:
    t = m.get("target") or {}
    return f"{t.get('kind', '')}: {t.get('name', '')}"


META_FIELDS: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("run_id", lambda m: m.get("run_id")),
    ("status", lambda m: m.get("status")),
    ("workload", lambda m: (m.get("workload") or {}).get("name")),
    ("workload source", lambda m: (m.get("workload") or {}).get("source")),
    ("token counts", lambda m: tokens_label((m.get("workload") or {}).get("tokens"))),
    ("target", _target),
    ("deployment", lambda m: deployment(m).text()),
    ("seed", lambda m: m.get("seed")),
    ("started", lambda m: m.get("started_at")),
    ("wall time (s)", lambda m: m.get("wall_s")),
    ("host", lambda m: m.get("host")),
    ("kvbench", lambda m: m.get("kvbench_version")),
    ("command", lambda m: " ".join(map(str, m.get("command") or [])) or None),
]


def nominal_text(r: RunData) -> str:
    """'40 (asked)' or '7.609 (schedule)': the rate the run's achieved arrival rate is held against."""
    rates = rates_of(r.manifest, r.summary)
    return f"{fmt.number(rates.nominal, fmt.BRIEF)} ({rates.source})"


def _text(value: Any) -> str:
    return fmt.EN_DASH if value is None else str(value)


def runs_table(runs: list[RunData], palette: dict[str, Any] | None) -> Table:
    head: list[Any] = ["field"] + [Cell(r.name, swatch=hex_colour(palette[r.name]) if palette else None) for r in runs]
    rows: list[list[Any]] = [["path"] + [Cell(r.path, "mono") for r in runs]]
    rows += [[label] + [_text(get(r.manifest)) for r in runs] for label, get in META_FIELDS]
    rows.append(["SLO (ms)"] + [fmt.limits(r.slo) or "none" for r in runs])
    rows.append(["nominal arrival rate (req/s)"] + [nominal_text(r) for r in runs])
    return Table(head, rows, num_from=len(head))


def summary_table(runs: list[RunData], rows: list[Row]) -> Table:
    return Table(["metric"] + [r.name for r in runs], [[row.label] + list(row.values) for row in rows])


def ci_cell(row: Row, value: Any, d: Delta | None) -> Cell:
    """A run's difference to the base: coloured and flagged only when its CI excludes zero."""
    text, cls = delta(row.raw[0], value, row.direction, row.display)
    if d is None or d.ci is None:
        return Cell(text, "same", ci="no CI (not a per-request figure)" if cls != "same" else "")
    lo, hi = (fmt.number(v, fmt.REPORT_DELTA) for v in d.ci)
    interval = f"{fmt.share(LEVEL)} CI [{lo}, {hi}]"
    if not d.significant or cls == "same":
        return Cell(text, "same", ci=f"{interval}: {NO_CHANGE}")
    return Cell(text, cls, ci=interval, mark=" ✅" if cls == "better" else " ❌")


def comparison_table(runs: list[RunData], rows: list[Row], deltas: list[dict[str, Delta]]) -> Table:
    """Each run against the base (runs[0]); deltas[i - 1]: bootstrap Deltas of run i by summary key."""
    head = ["metric", f"{runs[0].name} (base)"] + [f"{r.name} − base" for r in runs[1:]]
    body = [
        [row.label, row.values[0]] + [ci_cell(row, v, ds.get(row.key)) for v, ds in zip(row.raw[1:], deltas)]
        for row in rows
    ]
    return Table(head, body)


def goodput_table(goodputs: list[tuple[str, dict[str, Any]]]) -> Table:
    rows = []
    for label, doc in goodputs:
        rate = "none" if goodput_of(doc) is None else fmt.number(goodput_of(doc), fmt.BRIEF)
        nominal, per_gpu = (fmt.number(doc.get(k), fmt.BRIEF) for k in ("rate", "per_gpu"))
        slo = fmt.limits(doc.get("slo") or {})
        rows.append([label, fmt.share(doc["target"]), slo, rate, nominal, per_gpu, fmt.count(len(doc["curve"]))])
    head = ["search", "attainment target", "SLO (ms)", "goodput, achieved (req/s)", "nominal (req/s)", "per GPU"]
    return Table([*head, "probes"], rows, num_from=3)


def failures_table(runs: list[RunData]) -> Table | None:
    rows: list[list[Any]] = [
        [r.name, kind, Cell(detail, "mono"), fmt.count(n)] for r in runs for kind, detail, n in r.failures
    ]
    return Table(["run", "kind", "detail", "requests"], rows, num_from=3) if rows else None
