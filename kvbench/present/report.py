"""`kvbench report`: gather each run's figures with SQL, draw them, and write one self-contained HTML or Markdown file.

Everything heavy is aggregated in DuckDB: latency CDFs are drawn from quantiles (never from every request),
KV transfers from a deterministic sample, the rest from time buckets (collect.py). The summary table's rows are
the catalogue's report rows (rows.py), the figures are in sections.py and the page in render.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from kvbench.analysis.runset import check_parts, check_run, expand, run_names
from kvbench.analysis.slo import parse_slo
from kvbench.config import ConfigError
from kvbench.plan.goodput import read_result
from kvbench.present.collect import RunData, collect_run
from kvbench.present.render import render_html, render_md
from kvbench.present.rows import summary_rows
from kvbench.present.sections import build_sections
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


def _split_inputs(paths: list[Path]) -> tuple[list[Path], list[tuple[str, dict]]]:
    """Run directories, and goodput results (a goodput.json or a directory holding one and no run.json)."""
    runs: list[Path] = []
    goodputs: list[tuple[str, dict]] = []
    for p in expand(paths):
        if (p.is_dir() and (p / "goodput.json").is_file() and not (p / "run.json").is_file()) or (
            p.is_file() and p.suffix == ".json"
        ):
            goodputs.append((p.resolve().name if p.is_dir() else p.stem, read_result(p)))
        else:
            runs.append(p)
    return runs, goodputs


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


def build_report(
    paths: list[Path],
    out_format: str = "html",
    slo_text: str | None = None,
    bucket_s: float | None = None,
    progress: Callable[[str], object] | None = None,
) -> str:
    """The report text (HTML or Markdown) for runs (and goodput results) at `paths`."""
    if out_format not in ("html", "md"):
        raise ConfigError(f"--format must be html or md, got {out_format!r}")
    if bucket_s is not None and not bucket_s > 0:
        raise ConfigError(f"--bucket must be > 0 seconds, got {bucket_s}")
    slo = parse_slo(slo_text) if slo_text else None
    dirs, goodputs = _split_inputs(paths)
    names = run_names(dirs) if dirs else []
    if len(set(names)) != len(names):
        raise ConfigError("the same run directory is given twice")
    if bucket_s is None:  # one width for every run, so their curves share the time axis
        bucket_s = auto_bucket_s(max([_span_ns(d) for d in dirs], default=0))
    runs: list[RunData] = []
    for d, name in zip(dirs, names):
        runs.append(collect_run(d, name, slo, bucket_s))
        if progress:
            progress(name)
    rows = summary_rows([r.summary for r in runs])
    if out_format == "md":
        return render_md(runs, rows, goodputs)
    from kvbench.present.plots import palette_for  # matplotlib: only the HTML page draws

    palette = palette_for(names)
    sections = build_sections(runs, goodputs, palette, bucket_s)
    return render_html(runs, sections, rows, goodputs, palette, __version__)


def report_command(paths: list[Path], out: Path, out_format: str, slo_text: str | None, bucket_s: float | None) -> None:
    """`kvbench report`: build the report, write it to `out`, show progress on stderr."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("reading runs") as status:
        text = build_report(paths, out_format, slo_text, bucket_s, progress=lambda n: status.update(f"read {n}"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    console.print(f"report → {out}")
