"""Performance gate, pure: rules (from TOML data) + baseline and candidate summaries -> verdicts, Markdown, JUnit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from kvbench.analysis.catalogue import Direction, direction_of, is_known
from kvbench.config import ConfigError, Range, Source, read, reject_unknown
from kvbench.present import fmt


@dataclass(frozen=True)
class Rule:
    name: str
    key: str  # summary metric key, e.g. "ttft_ms.p99"
    direction: Direction  # which way is better; NEITHER: a change either way counts against the tolerance
    tolerance_pct: float | None = None  # allowed worsening, % of the baseline value
    tolerance_abs: float | None = None  # allowed worsening, in the metric's unit
    min_samples: int = 0
    max: float | None = None  # absolute limits on the candidate
    min: float | None = None
    strict: bool = False  # fail on a difference beyond tolerance even when its interval includes zero

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))  # "lower" given as text works too


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
    direction: Literal["lower", "higher", "neither"] | None = None  # default: the metric's, from the catalogue
    tolerance_pct: float | None = None
    tolerance_abs: float | None = None
    min_samples: Annotated[int, Range(0)] = 0
    max: float | None = None
    min: float | None = None
    strict: bool = False


def parse_rule(rule: _RuleFile, i: int, src: Source) -> Rule:
    """One [[rule]] table (already read: keys and types checked); errors name the file, line and rule. The metric
    must be in the catalogue; its direction defaults to the catalogue's."""
    loc = f"{src.at(('rule', i))} (rule {i + 1})"
    if not rule.metric:
        raise ConfigError(f'{loc}: the rule needs metric = "..." (e.g. ttft_ms with statistic = "p99")')
    key = f"{rule.metric}.{rule.statistic}" if rule.statistic else rule.metric
    if not is_known(key):
        raise ConfigError(f"{loc}: unknown metric {key!r} (see `kvbench summary RUN --json` for the names)")
    if rule.tolerance_pct is not None and rule.tolerance_abs is not None:
        raise ConfigError(f"{loc}: give tolerance_pct or tolerance_abs, not both")
    direction = Direction(rule.direction) if rule.direction else direction_of(key)
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


def parse_rules(data: dict[str, Any], path: str, text: str) -> tuple[Rule, ...]:
    """Rules of a gates.toml: a list of [[rule]] tables."""
    src = Source(path, text)
    reject_unknown(data, ("rule",), src)
    rules = data.get("rule")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        raise ConfigError(f"{path}: expected one or more [[rule]] tables")
    return tuple(parse_rule(read(_RuleFile, r, src, ("rule", i)), i, src) for i, r in enumerate(rules))


def _samples(doc: dict[str, Any], key: str) -> int:
    m = doc["metrics"]
    name = key.partition(".")[0]
    return int(m.get(f"{name}.count", m.get("requests", 0)) or 0)


def _limits(rule: Rule, cand: float) -> str | None:
    if rule.max is not None and cand > rule.max:
        return f"{fmt.number(cand, fmt.EXACT)} above the limit {fmt.short(rule.max)}"
    if rule.min is not None and cand < rule.min:
        return f"{fmt.number(cand, fmt.EXACT)} below the limit {fmt.short(rule.min)}"
    return None


PASSING = ("pass", "noisy")


def _verdict(rule: Rule, status: str, message: str, cand: float | None = None) -> Verdict:
    """A verdict decided before any comparison with the baseline."""
    return Verdict(rule, status in PASSING, status, None, cand, None, None, None, message)


def _too_few(rule: Rule, base: dict[str, Any] | None, cand: dict[str, Any]) -> str | None:
    for side, doc in (("candidate", cand), ("baseline", base)):
        if doc is not None and _samples(doc, rule.key) < rule.min_samples:
            return f"{side} has {_samples(doc, rule.key)} samples, the rule needs {rule.min_samples}"
    return None


def check(rule: Rule, base: dict[str, Any] | None, cand: dict[str, Any], delta_fn: Callable) -> Verdict:
    """Verdict of one rule. delta_fn(key, base, cand) -> compare.Delta (point difference and its interval)."""
    c = cand["metrics"].get(rule.key)
    if c is None:
        return _verdict(rule, "missing", "candidate has no value")
    few = _too_few(rule, base, cand)
    if few:
        return _verdict(rule, "samples", few, c)
    limit = _limits(rule, c)
    if limit or base is None:
        return _verdict(rule, "limit" if limit else "pass", limit or "within limits", c)
    d = delta_fn(rule.key, base, cand)
    if d.base is None:
        return _verdict(rule, "missing", "baseline has no value", c)
    worse = _worsening(rule.direction, d.delta)
    allowed = rule.tolerance_abs if rule.tolerance_abs is not None else abs(d.base) * (rule.tolerance_pct or 0) / 100
    if worse <= allowed:
        status, message = "pass", "within tolerance"
    elif not rule.strict and d.significant is False:
        status, message = "noisy", "beyond tolerance but the interval includes 0 (noise); strict = true fails it"
    else:
        status = "regression"
        message = (
            f"{_moved(rule.direction, worse)} by {fmt.number(abs(d.delta), fmt.EXACT)}, "
            f"allowed {fmt.number(allowed, fmt.EXACT)}"
        )
    return Verdict(rule, status in PASSING, status, d.base, c, d.delta, d.ci, allowed, message)


def _worsening(direction: Direction, delta: float) -> float:
    """How much worse the candidate is (negative: better); with no better direction, any change counts."""
    if direction is Direction.NEITHER:
        return abs(delta)
    return delta if direction is Direction.LOWER else -delta


def _moved(direction: Direction, worse: float) -> str:
    return "worse" if worse > 0 and direction is not Direction.NEITHER else "changed"


def evaluate(
    rules: tuple[Rule, ...], base: dict[str, Any] | None, cand: dict[str, Any], delta_fn: Callable
) -> list[Verdict]:
    return [check(r, base, cand, delta_fn) for r in rules]


def _f(v: float | None) -> str:
    return fmt.number(v, fmt.EXACT)


def _tol(r: Rule) -> str:
    if r.tolerance_abs is not None:
        return f"±{fmt.short(r.tolerance_abs)}"
    return f"{fmt.short(r.tolerance_pct)} %" if r.tolerance_pct is not None else "0"


def to_markdown(verdicts: list[Verdict], title: str = "kvbench gate") -> str:
    """A Markdown table (CI job summary); every name or path in it is escaped as `report --format md` does."""
    from kvbench.present.render import md_esc as esc

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
