"""Performance gate, pure: rules (from TOML data) + baseline and candidate summaries -> verdicts, Markdown, JUnit."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from kvbench.config import ConfigError, Range, Source, read, reject_unknown

HIGHER_IS_BETTER = (
    "request_throughput",
    "output_token_throughput",
    "total_token_throughput",
    "goodput",
    "slo_attainment",
    "prefix_hit_ratio",
    "trace_hit_ratio",
    "finished",
    "good",
)
DYNAMIC = re.compile(
    r"(prefix_hit_ratio|trace_hit_ratio)\.(tier|instance)\.[^.]+|failures\.[A-Z]+\..+"
    r"|instance\.[^.]+\.(utilisation|steps|batch|kv_occupancy|kv_occupancy_max)"
)


@dataclass(frozen=True)
class Rule:
    name: str
    key: str  # summary metric key, e.g. "ttft_ms.p99"
    direction: str  # "lower" or "higher" is better
    tolerance_pct: float | None = None  # allowed worsening, % of the baseline value
    tolerance_abs: float | None = None  # allowed worsening, in the metric's unit
    min_samples: int = 0
    max: float | None = None  # absolute limits on the candidate
    min: float | None = None
    strict: bool = False  # fail on a difference beyond tolerance even when its interval includes zero


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    passed: bool
    status: str  # pass | noisy | regression | limit | samples | missing
    base: float | None
    cand: float | None
    delta: float | None
    ci: tuple[float, float] | None
    allowed: float | None  # allowed worsening in the metric's unit
    message: str


@dataclass(frozen=True)
class _RuleFile:
    """One [[rule]] table as written; parse_rule derives the Rule."""

    metric: str = ""
    statistic: str = ""
    name: str = ""
    direction: Literal["lower", "higher"] | None = None  # default: by metric (HIGHER_IS_BETTER)
    tolerance_pct: float | None = None
    tolerance_abs: float | None = None
    min_samples: Annotated[int, Range(0)] = 0
    max: float | None = None
    min: float | None = None
    strict: bool = False


def parse_rule(rule: _RuleFile, i: int, src: Source, known: Callable[[str], bool]) -> Rule:
    """One [[rule]] table (already read: keys and types checked); errors name the file, line and rule."""
    loc = f"{src.at(('rule', i))} (rule {i + 1})"
    if not rule.metric:
        raise ConfigError(f'{loc}: the rule needs metric = "..." (e.g. ttft_ms with statistic = "p99")')
    key = f"{rule.metric}.{rule.statistic}" if rule.statistic else rule.metric
    if not known(key):
        raise ConfigError(f"{loc}: unknown metric {key!r} (see `kvbench summary RUN --json` for the names)")
    if rule.tolerance_pct is not None and rule.tolerance_abs is not None:
        raise ConfigError(f"{loc}: give tolerance_pct or tolerance_abs, not both")
    direction = rule.direction or ("higher" if rule.metric in HIGHER_IS_BETTER else "lower")
    return Rule(
        rule.name or key,
        key,
        direction,
        rule.tolerance_pct,
        rule.tolerance_abs,
        rule.min_samples,
        rule.max,
        rule.min,
        rule.strict,
    )


def parse_rules(data: dict, path: str, text: str, known_keys: set[str]) -> tuple[Rule, ...]:
    """Rules of a gates.toml: a list of [[rule]] tables."""
    src = Source(path, text)
    reject_unknown(data, ("rule",), src)
    rules = data.get("rule")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        raise ConfigError(f"{path}: expected one or more [[rule]] tables")
    known = lambda k: k in known_keys or bool(DYNAMIC.fullmatch(k))  # noqa: E731
    return tuple(parse_rule(read(_RuleFile, r, src, ("rule", i)), i, src, known) for i, r in enumerate(rules))


def _samples(doc: dict[str, Any], key: str) -> int:
    m = doc["metrics"]
    name = key.partition(".")[0]
    return int(m.get(f"{name}.count", m.get("requests", 0)) or 0)


def _limits(rule: Rule, cand: float) -> str | None:
    if rule.max is not None and cand > rule.max:
        return f"{cand:.6g} above the limit {rule.max:g}"
    if rule.min is not None and cand < rule.min:
        return f"{cand:.6g} below the limit {rule.min:g}"
    return None


def check(rule: Rule, base: dict[str, Any] | None, cand: dict[str, Any], delta_fn: Callable) -> Verdict:
    """Verdict of one rule. delta_fn(key, base, cand) -> compare.Delta (point difference and its interval)."""
    c = cand["metrics"].get(rule.key)
    if c is None:
        return Verdict(rule, False, "missing", None, None, None, None, None, "candidate has no value")
    for side, doc in (("candidate", cand), ("baseline", base)):
        if doc is not None and _samples(doc, rule.key) < rule.min_samples:
            return Verdict(
                rule,
                False,
                "samples",
                None,
                c,
                None,
                None,
                None,
                f"{side} has {_samples(doc, rule.key)} samples, the rule needs {rule.min_samples}",
            )
    limit = _limits(rule, c)
    if limit or base is None:
        return Verdict(
            rule, not limit, "limit" if limit else "pass", None, c, None, None, None, limit or "within limits"
        )
    d = delta_fn(rule.key, base, cand)
    if d.base is None:
        return Verdict(rule, False, "missing", None, c, None, None, None, "baseline has no value")
    worse = d.delta if rule.direction == "lower" else -d.delta
    allowed = rule.tolerance_abs if rule.tolerance_abs is not None else abs(d.base) * (rule.tolerance_pct or 0) / 100
    if worse <= allowed:
        return Verdict(rule, True, "pass", d.base, c, d.delta, d.ci, allowed, "within tolerance")
    if not rule.strict and d.significant is False:
        return Verdict(
            rule,
            True,
            "noisy",
            d.base,
            c,
            d.delta,
            d.ci,
            allowed,
            "beyond tolerance but the interval includes 0 (noise); strict = true fails it",
        )
    return Verdict(
        rule,
        False,
        "regression",
        d.base,
        c,
        d.delta,
        d.ci,
        allowed,
        f"{'worse' if worse > 0 else 'changed'} by {abs(d.delta):.6g}, allowed {allowed:.6g}",
    )


def evaluate(
    rules: tuple[Rule, ...], base: dict[str, Any] | None, cand: dict[str, Any], delta_fn: Callable
) -> list[Verdict]:
    return [check(r, base, cand, delta_fn) for r in rules]


def _f(v: float | None) -> str:
    return "—" if v is None else f"{v:.6g}"


def _tol(r: Rule) -> str:
    if r.tolerance_abs is not None:
        return f"±{r.tolerance_abs:g}"
    return f"{r.tolerance_pct:g} %" if r.tolerance_pct is not None else "0"


def to_markdown(verdicts: list[Verdict], title: str = "kvbench gate") -> str:
    """A Markdown table (CI job summary). Names come from the rules file, pipes escaped."""
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    failed = sum(not v.passed for v in verdicts)
    lines = [
        f"### {esc(title)}: {'FAIL' if failed else 'PASS'} ({len(verdicts) - failed}/{len(verdicts)} rules pass)",
        "",
        "| rule | better | tolerance | baseline | candidate | delta | 95 % CI | verdict | note |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for v in verdicts:
        ci = f"[{_f(v.ci[0])}, {_f(v.ci[1])}]" if v.ci else "—"
        mark = "✅" if v.passed else "❌"
        lines.append(
            f"| {esc(v.rule.name)} | {v.rule.direction} | {_tol(v.rule)} | {_f(v.base)} | {_f(v.cand)} | "
            f"{_f(v.delta)} | {ci} | {mark} {v.status} | {esc(v.message)} |"
        )
    return "\n".join(lines) + "\n"


def to_junit(verdicts: list[Verdict], suite: str = "kvbench gate") -> str:
    """JUnit XML: one testcase per rule, a <failure> for each failed one."""
    import xml.etree.ElementTree as ET

    failures = sum(not v.passed for v in verdicts)
    root = ET.Element("testsuite", name=suite, tests=str(len(verdicts)), failures=str(failures), errors="0")
    for v in verdicts:
        case = ET.SubElement(root, "testcase", classname="kvbench.present.gate", name=v.rule.name)
        text = f"{v.rule.key}: baseline {_f(v.base)}, candidate {_f(v.cand)}, delta {_f(v.delta)}; {v.message}"
        if v.passed:
            ET.SubElement(case, "system-out").text = text
        else:
            ET.SubElement(case, "failure", message=f"{v.status}: {v.message}", type=v.status).text = text
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
