"""`kvbench report`: gather each run's figures with SQL, draw them, and write one self-contained HTML or Markdown file.

Everything heavy is aggregated in DuckDB: latency CDFs are drawn from quantiles (never from every request),
KV transfers from a deterministic sample, the rest from time buckets (collect.py). The tables are in tables.py,
the figures in sections.py, the page in render.py (Jinja2 templates).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbench.analysis.bootstrap import LEVEL, MAX_SAMPLE, RESAMPLES
from kvbench.analysis.runset import check_parts, check_run, expand, run_names
from kvbench.analysis.slo import parse_slo
from kvbench.config import ConfigError
from kvbench.plan.goodput import read_result
from kvbench.present.collect import RunData, collect_run
from kvbench.present.deploy import deployment
from kvbench.present.plandata import PlanData, is_plan_dir, read_plan
from kvbench.present.planreport import plan_parts
from kvbench.present.render import render_html, render_md, run_warnings
from kvbench.present.rows import summary_rows
from kvbench.present.tables import Part, comparison_table, failures_table, goodput_table, runs_table, summary_table
from kvbench.units import ns_to_s
from kvbench.version import __version__

TARGET_BUCKETS = 240  # over-time figures aim at about this many buckets when --bucket is not given


def auto_bucket_s(span_ns: int) -> float:
    """The smallest 1/2/5 x 10^k seconds that cuts `span_ns` into at most TARGET_BUCKETS buckets (>= 1 ms)."""
    raw = max(ns_to_s(span_ns) / TARGET_BUCKETS, 1e-3)
    exp = math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        if step * 10.0**exp >= raw * (1 - 1e-9):
            return round(step * 10.0**exp, 6)
    return 10.0 ** (exp + 1)


def natural_key(name: str) -> list:
    """Sort key putting rate-5 before rate-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def order_runs(dirs: list[Path], baseline: Path | None, keep_order: bool) -> list[Path]:
    """Runs in natural order of their names (or as given with `keep_order`), the `baseline` run first."""
    ordered = list(dirs) if keep_order else sorted(dirs, key=lambda d: natural_key(d.resolve().name))
    if baseline is None:
        return ordered
    base = next((d for d in ordered if d.resolve() == baseline.resolve()), None)
    if base is None:
        raise ConfigError(f"--baseline {baseline} is not one of the runs given")
    return [base] + [d for d in ordered if d is not base]


def _split_inputs(paths: list[Path]) -> tuple[list[Path], list[tuple[str, dict]], list[PlanData]]:
    """Run directories, goodput results (a goodput.json or a directory holding one and no run.json) and plans."""
    runs: list[Path] = []
    goodputs: list[tuple[str, dict]] = []
    plans: list[PlanData] = []
    for p in expand(paths):
        if is_plan_dir(p):
            plans.append(read_plan(p))
        elif (p.is_dir() and (p / "goodput.json").is_file() and not (p / "run.json").is_file()) or (
            p.is_file() and p.suffix == ".json"
        ):
            goodputs.append((p.resolve().name if p.is_dir() else p.stem, read_result(p)))
        else:
            runs.append(p)
    return runs, goodputs, plans


def _span_ns(run_dir: Path) -> int:
    """Last event time of a run (one column scan; run.json counts are missing in killed runs)."""
    import duckdb

    check_run(run_dir)
    files = check_parts(run_dir, "events")
    if not files:
        return 0
    con = duckdb.connect()
    try:
        row = con.execute("SELECT coalesce(max(t_ns), 0) FROM read_parquet(?)", [files]).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def _deltas(runs: list[RunData], keys: list[str]) -> list[dict[str, Any]]:
    """Per run after the base: bootstrap Deltas (kvbench compare's) of each summary key, by key."""
    from kvbench.present.compare import delta_for

    base = {"metrics": runs[0].summary, "samples": runs[0].samples}
    return [{k: delta_for(k, base, {"metrics": r.summary, "samples": r.samples}) for k in keys} for r in runs[1:]]


COMPARISON_INTRO = (
    f"Differences to the base run with {{level}} bootstrap confidence intervals ({RESAMPLES:,} seeded "
    f"resamples of up to {MAX_SAMPLE:,} requests per run). A change is coloured only when its interval excludes "
    "zero; otherwise it reads “no significant change”. Counts and rates have no per-request samples: no interval."
)


def table_parts(runs: list[RunData], goodputs: list[tuple[str, dict]], palette: dict | None) -> list[Part]:
    """The report's tables, in reading order."""
    parts = [Part("runs", "Runs", [runs_table(runs, palette)])] if runs else []
    rows = summary_rows([r.summary for r in runs], [deployment(r.manifest).gpus for r in runs])
    if runs:
        parts.append(Part("summary", "Summary", [summary_table(runs, rows)]))
    if len(runs) > 1:
        table = comparison_table(runs, rows, _deltas(runs, [row.key for row in rows]))
        intro = COMPARISON_INTRO.format(level=f"{LEVEL:.0%}")
        parts.append(Part("comparison", f"Comparison with {runs[0].name}", [table], intro=intro))
    if goodputs:
        parts.append(Part("goodput", "Goodput search", [goodput_table(goodputs)]))
    return parts


def _failures(runs: list[RunData]) -> list[Part]:
    if not runs:
        return []
    table = failures_table(runs)
    return [Part("failures", "Failures", [table] if table else [], note="" if table else "No request failed.")]


def build_report(
    paths: list[Path],
    out_format: str = "html",
    slo_text: str | None = None,
    bucket_s: float | None = None,
    progress: Callable[[str], object] | None = None,
    baseline: Path | None = None,
    keep_order: bool = False,
) -> str:
    """The report text (HTML or Markdown) for runs (and goodput results and plans) at `paths`."""
    if out_format not in ("html", "md"):
        raise ConfigError(f"--format must be html or md, got {out_format!r}")
    if bucket_s is not None and not bucket_s > 0:
        raise ConfigError(f"--bucket must be > 0 seconds, got {bucket_s}")
    slo = parse_slo(slo_text) if slo_text else None
    dirs, goodputs, plans = _split_inputs(paths)
    names = run_names(dirs) if dirs else []
    if len(set(names)) != len(names):
        raise ConfigError("the same run directory is given twice")
    dirs = order_runs(dirs, baseline, keep_order)
    names = run_names(dirs) if dirs else []
    if bucket_s is None:  # one width for every run, so their curves share the time axis
        bucket_s = auto_bucket_s(max([_span_ns(d) for d in dirs], default=0))
    runs: list[RunData] = []
    for d, name in zip(dirs, names):
        runs.append(collect_run(d, name, slo, bucket_s))
        if progress:
            progress(name)
    warnings = run_warnings(runs)
    if out_format == "md":
        parts = plan_parts(plans, html=False) + table_parts(runs, goodputs, None) + _failures(runs)
        return render_md("kvbench report", parts, warnings)
    from kvbench.present.plots import palette_for  # matplotlib: only the HTML page draws
    from kvbench.present.sections import figure_parts

    palette = palette_for(names)
    figures = figure_parts(runs, goodputs, palette, bucket_s) if runs or goodputs else []
    parts = plan_parts(plans, html=True) + table_parts(runs, goodputs, palette) + figures + _failures(runs)
    only_plan = f": plan {plans[0].name}" if len(plans) == 1 and not runs else ""
    title = "kvbench report" + (f": {runs[0].name}" if len(runs) == 1 else only_plan)
    sub = ", ".join(
        f"{n} {what}{'s' if n != 1 and what != 'goodput search' else ''}"
        for n, what in ((len(runs), "run"), (len(goodputs), "goodput search"), (len(plans), "plan"))
        if n or (what == "run" and not plans)
    )
    return render_html(title, sub, parts, warnings, __version__)


def default_out(out: Path | None, out_format: str) -> Path | None:
    """report.html or report.md when -o is not given; None for `-o -` (stdout)."""
    if out is None:
        return Path(f"report.{out_format}")
    return None if str(out) == "-" else out


def report_command(
    paths: list[Path],
    out: Path | None,
    out_format: str,
    slo_text: str | None,
    bucket_s: float | None,
    baseline: Path | None = None,
    keep_order: bool = False,
) -> None:
    """`kvbench report`: build the report, write it to `out` (or stdout), show progress on stderr."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("reading runs") as status:
        text = build_report(
            paths, out_format, slo_text, bucket_s, lambda n: status.update(f"read {n}"), baseline, keep_order
        )
    target = default_out(out, out_format)
    if target is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    console.print(f"report → {target}")
