"""Report text: one self-contained HTML page (inline CSS, figures as data: URIs, no script) or Markdown.

Every string that comes from a run (run.json fields, instance names, error details, paths) is untrusted and
goes through `esc` (HTML) or `md_esc` (Markdown, which CI job summaries render as HTML too).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvbench.analysis.rates import rate_warning, rates_of
from kvbench.plan.goodput import goodput_of
from kvbench.present import fmt
from kvbench.present.rows import Row, delta
from kvbench.present.summary import client_lag_warning

if TYPE_CHECKING:
    from kvbench.present.collect import RunData
    from kvbench.present.sections import Section

Goodput = tuple[str, dict[str, Any]]  # (label, goodput.json document)

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--alt:#f6f8fa;--accent:#0969da;--good:#1a7f37;--bad:#cf222e}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1120px;margin:0 auto;padding:24px 28px 48px}
header{border-bottom:1px solid var(--line);margin-bottom:16px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:19px;margin:32px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:22px 0 6px}
.sub{color:var(--muted);margin:0 0 14px}
nav{display:flex;flex-wrap:wrap;gap:6px 14px;font-size:13px;margin-bottom:8px}
nav a{color:var(--accent);text-decoration:none}nav a:hover{text-decoration:underline}
table{border-collapse:collapse;width:auto;min-width:60%;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--alt);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#fbfcfd}
.better{color:var(--good)}.worse{color:var(--bad)}.same{color:var(--muted)}
.wrap{overflow-x:auto}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
figure{margin:8px 0 20px}figure img{max-width:100%;height:auto;border:1px solid var(--line);border-radius:6px}
figcaption{color:var(--muted);font-size:12.5px;margin-top:4px}
.note{background:var(--alt);border-left:3px solid var(--line);padding:8px 12px;color:var(--muted);margin:6px 0 16px}
.warn{background:#fff8c5;border-left:4px solid #d4a72c;padding:8px 12px;margin:10px 0;font-weight:600}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:baseline}
footer{color:var(--muted);font-size:12px;margin-top:36px;border-top:1px solid var(--line);padding-top:8px}
"""


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def md_esc(value: object) -> str:
    """Text safe in a Markdown table cell: HTML-escaped, Markdown punctuation backslashed, one line."""
    text = html.escape("" if value is None else str(value), quote=True)
    text = re.sub(r"([\\`*_\[\]|#~!])", r"\\\1", text)
    return " ".join(text.split())


def _hex(colour: Sequence[float]) -> str:
    r, g, b = (int(round(c * 255)) for c in colour[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _table(head: list[str], rows: list[list[str]], num_from: int = 1) -> str:
    """`head` and `rows` are already-escaped HTML; columns from `num_from` on are right-aligned numbers."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i >= num_from else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<div class="wrap"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


META_FIELDS: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("run_id", lambda m: m.get("run_id")),
    ("status", lambda m: m.get("status")),
    ("workload", lambda m: (m.get("workload") or {}).get("name")),
    ("workload source", lambda m: (m.get("workload") or {}).get("source")),
    ("target", lambda m: "{kind}: {name}".format(**{"kind": "", "name": "", **(m.get("target") or {})})),
    ("seed", lambda m: m.get("seed")),
    ("started", lambda m: m.get("started_at")),
    ("wall time (s)", lambda m: m.get("wall_s")),
    ("host", lambda m: m.get("host")),
    ("kvbench", lambda m: m.get("kvbench_version")),
    ("command", lambda m: " ".join(map(str, m.get("command") or [])) or None),
]


def _runs_html(runs: list[RunData], palette: dict[str, Any]) -> str:
    head = ["field"] + [
        f'<span class="swatch" style="background:{_hex(palette[r.name])}"></span>{esc(r.name)}' for r in runs
    ]
    rows = [["path"] + [f'<span class="mono">{esc(r.path)}</span>' for r in runs]]
    for label, get in META_FIELDS:
        rows.append([esc(label)] + [esc(get(r.manifest)) if get(r.manifest) is not None else "–" for r in runs])
    rows.append(["SLO (ms)"] + [esc(fmt.limits(r.slo) or "none") for r in runs])
    rows.append(["nominal arrival rate (req/s)"] + [esc(nominal_text(r)) for r in runs])
    return _table(head, rows, num_from=len(head))


def nominal_text(r: RunData) -> str:
    """'40 (asked)' or '7.609 (schedule)': the rate the run's achieved arrival rate is held against."""
    rates = rates_of(r.manifest, r.summary)
    return f"{fmt.number(rates.nominal, fmt.BRIEF)} ({rates.source})"


def _summary_html(runs: list[RunData], rows: list[Row]) -> str:
    return _table(
        ["metric"] + [esc(r.name) for r in runs], [[esc(row.label)] + [esc(v) for v in row.values] for row in rows]
    )


def _comparison_html(runs: list[RunData], rows: list[Row]) -> str:
    base = runs[0].name
    head = ["metric", f"{esc(base)} (base)"] + [f"{esc(r.name)} − base" for r in runs[1:]]
    body = []
    for row in rows:
        cells = [
            f'<span class="{cls}">{esc(text)}</span>'
            for text, cls in (delta(row.raw[0], v, row.direction, row.display) for v in row.raw[1:])
        ]
        body.append([esc(row.label), esc(row.values[0])] + cells)
    return _table(head, body)


def _rate(doc: dict[str, Any]) -> str:
    return "none" if goodput_of(doc) is None else fmt.number(goodput_of(doc), fmt.BRIEF)


def _nominal(doc: dict[str, Any]) -> str:
    return fmt.number(doc.get("rate"), fmt.BRIEF)


def _per_gpu(doc: dict[str, Any]) -> str:
    return fmt.number(doc.get("per_gpu"), fmt.BRIEF)


def _goodput_html(goodputs: list[Goodput]) -> str:
    rows = []
    for label, doc in goodputs:
        slo = fmt.limits(doc.get("slo") or {})
        cells = [label, fmt.share(doc["target"]), slo, _rate(doc), _nominal(doc), _per_gpu(doc), len(doc["curve"])]
        rows.append([esc(c) for c in cells])
    head = ["search", "attainment target", "SLO (ms)", "goodput, achieved (req/s)", "nominal (req/s)", "per GPU"]
    return _table([*head, "probes"], rows, num_from=3)


def _failures_html(runs: list[RunData]) -> str:
    rows = [
        [esc(r.name), esc(kind), f'<span class="mono">{esc(detail)}</span>', esc(fmt.count(n))]
        for r in runs
        for kind, detail, n in r.failures
    ]
    if not rows:
        return '<div class="note">No request failed.</div>'
    return _table(["run", "kind", "detail", "requests"], rows, num_from=3)


def _figure_html(s: Section) -> str:
    if s.png_b64 is None:
        return f'<h3 id="{esc(s.key)}">{esc(s.title)}</h3><div class="note">{esc(s.note)}</div>'
    return (
        f'<figure id="{esc(s.key)}"><h3>{esc(s.title)}</h3><img alt="{esc(s.title)}" '
        f'src="data:image/png;base64,{s.png_b64}"><figcaption>{esc(s.caption)}</figcaption></figure>'
    )


def run_warnings(runs: list[RunData]) -> list[str]:
    """Per run (plain, unescaped text): the client-lag warning when run.json says the client fell behind, and the
    arrival-rate warning when the achieved rate is more than 5 % from the nominal one."""
    lag = [client_lag_warning(r.manifest.get("client_lag"), r.name) for r in runs]
    rate = [(r.name, rate_warning(rates_of(r.manifest, r.summary))) for r in runs]
    return [w for w in lag if w] + [f"run {name}: {w}" for name, w in rate if w]


def render_html(
    runs: list[RunData],
    sections: list[Section],
    rows: list[Row],
    goodputs: list[Goodput],
    palette: dict[str, Any],
    version: str,
) -> str:
    """The report as one self-contained HTML page."""
    parts = [("runs", "Runs", _runs_html(runs, palette) if runs else "")]
    if runs:
        parts.append(("summary", "Summary", _summary_html(runs, rows)))
    if len(runs) > 1:
        parts.append(("comparison", "Comparison with the first run", _comparison_html(runs, rows)))
    if goodputs:
        parts.append(("goodput", "Goodput search", _goodput_html(goodputs)))
    parts.append(("figures", "Figures", "".join(_figure_html(s) for s in sections)))
    if runs:
        parts.append(("failures", "Failures", _failures_html(runs)))
    title = "kvbench report" + (f": {runs[0].name}" if len(runs) == 1 else "")
    nav = "".join(f'<a href="#{k}">{esc(t)}</a>' for k, t, _ in parts)
    body = "".join(f'<section id="{k}"><h2>{esc(t)}</h2>{content}</section>' for k, t, content in parts)
    warn = "".join(f'<div class="warn" role="alert">⚠ Warning: {esc(w)}</div>' for w in run_warnings(runs))
    sub = f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f", {len(goodputs)} goodput search" if goodputs else "")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f'<header><h1>{esc(title)}</h1><p class="sub">{esc(sub)}</p><nav>{nav}</nav></header>{warn}{body}'
        f"<footer>Generated by kvbench {esc(version)}. Self-contained: figures are embedded, no network "
        f"is needed to view this file.</footer></main></body></html>\n"
    )


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _md_runs(runs: list[RunData], rows: list[Row]) -> list[str]:
    out = _md_table(
        ["run", "status", "workload", "target", "SLO (ms)", "nominal rate (req/s)"],
        [
            [
                md_esc(r.name),
                md_esc(r.manifest.get("status")),
                md_esc((r.manifest.get("workload") or {}).get("name")),
                md_esc((r.manifest.get("target") or {}).get("name")),
                md_esc(fmt.limits(r.slo, le="<=") or "none"),
                md_esc(nominal_text(r)),
            ]
            for r in runs
        ],
    )
    out += ["", "## Summary", ""]
    return out + _md_table(
        ["metric"] + [md_esc(r.name) for r in runs],
        [[md_esc(row.label)] + [md_esc(v) for v in row.values] for row in rows],
    )


def _md_comparison(runs: list[RunData], rows: list[Row]) -> list[str]:
    mark = {"better": " ✅", "worse": " ❌", "same": ""}
    cells = [
        [
            md_esc(text) + mark[cls]
            for text, cls in (delta(row.raw[0], v, row.direction, row.display) for v in row.raw[1:])
        ]
        for row in rows
    ]
    return ["", f"## Comparison with {md_esc(runs[0].name)}", ""] + _md_table(
        ["metric", "base"] + [md_esc(r.name) for r in runs[1:]],
        [[md_esc(row.label), md_esc(row.values[0])] + c for row, c in zip(rows, cells)],
    )


def render_md(runs: list[RunData], rows: list[Row], goodputs: list[Goodput]) -> str:
    """The report as Markdown (no figures): runs, summary, comparison, goodput searches, failures."""
    out = ["# kvbench report", ""]
    out += [line for w in run_warnings(runs) for line in (f"> **⚠ Warning:** {md_esc(w)}", "")]
    if runs:
        out += _md_runs(runs, rows)
    if len(runs) > 1:
        out += _md_comparison(runs, rows)
    if goodputs:
        out += ["", "## Goodput search", ""]
        out += _md_table(
            ["search", "target", "goodput, achieved (req/s)", "nominal (req/s)", "per GPU"],
            [
                [md_esc(label), fmt.share(doc["target"]), _rate(doc), _nominal(doc), _per_gpu(doc)]
                for label, doc in goodputs
            ],
        )
    failures = [[md_esc(r.name), md_esc(k), md_esc(d), fmt.count(n)] for r in runs for k, d, n in r.failures]
    if failures:
        out += ["", "## Failures", ""] + _md_table(["run", "kind", "detail", "requests"], failures)
    return "\n".join(out) + "\n"
