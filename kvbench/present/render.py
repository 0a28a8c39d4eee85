"""Report text from Jinja2 templates (kvbench/present/templates): one self-contained HTML page or Markdown.

Every string that comes from a run (run.json fields, instance names, error details, paths) is untrusted: both
environments autoescape, and Markdown cells also backslash Markdown's punctuation (CI job summaries render
Markdown as HTML).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kvbench.analysis.rates import rate_warning, rates_of
from kvbench.present.summary import client_lag_warning

if TYPE_CHECKING:
    import jinja2

    from kvbench.present.collect import RunData
    from kvbench.present.tables import Part


def md_cell(value: Any) -> str:
    """A table cell or line of Markdown: punctuation backslashed, one line (the environment HTML-escapes it)."""
    if value is None:
        text = "–"
    elif hasattr(value, "text"):  # a Cell: its flag and interval follow the text
        text = value.text + value.mark + (f", {value.ci}" if value.ci else "")
    else:
        text = str(value)
    return " ".join(re.sub(r"([\\`*_\[\]|#~!])", r"\\\1", text).split())


def environment() -> jinja2.Environment:
    """Templates shipped in the package; autoescape on for every template, whatever its name."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kvbench.present", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_cell
    return env


def run_warnings(runs: list[RunData]) -> list[str]:
    """Per run (plain, unescaped text): the client-lag warning when run.json says the client fell behind, and the
    arrival-rate warning when the achieved rate is more than 5 % from the nominal one."""
    lag = [client_lag_warning(r.manifest.get("client_lag"), r.name) for r in runs]
    rate = [(r.name, rate_warning(rates_of(r.manifest, r.summary))) for r in runs]
    return [w for w in lag if w] + [f"run {name}: {w}" for name, w in rate if w]


def render_html(title: str, sub: str, parts: list[Part], warnings: list[str], version: str) -> str:
    """The report as one self-contained HTML page."""
    template = environment().get_template("report.html.j2")
    return template.render(title=title, sub=sub, parts=parts, warnings=warnings, version=version)


def render_md(title: str, parts: list[Part], warnings: list[str]) -> str:
    """The report as Markdown: the same parts' tables and notes, no figures."""
    text = environment().get_template("report.md.j2").render(title=title, parts=parts, warnings=warnings)
    return re.sub(r"\n{3,}", "\n\n", text)


def render_page(template: str, **context: Any) -> str:
    """Another page of the package's templates (the fidelity page)."""
    return environment().get_template(template).render(**context)


def md_esc(value: Any) -> str:
    """A Markdown cell outside a template (gate's job summary): md_cell, HTML-escaped as the templates do."""
    from markupsafe import escape

    return str(escape(md_cell(value)))
