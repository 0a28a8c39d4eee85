"""`kvbench gate`: load rules and the two sides, evaluate (kvbench.present.gate), print and write Markdown / JUnit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kvbench.analysis.catalogue import uses_slo
from kvbench.analysis.slo import parse_slo, slo_from_ms
from kvbench.config import ConfigError, load_toml
from kvbench.present.compare import delta_for, load_side
from kvbench.present.gate import Rule, evaluate, parse_rules, to_junit, to_markdown


def load_rules(path: Path) -> tuple[Rule, ...]:
    """The rules of a gates.toml; errors name the file and line."""
    data, text = load_toml(path)
    return parse_rules(data, str(path), text)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write ({e.strerror})") from None


def _check_same_slo(
    rules: tuple[Rule, ...],
    base: dict[str, Any] | None,
    cand: dict[str, Any],
    base_path: Path | None,
    cand_path: Path,
) -> None:
    """SLO-dependent figures of two sides are comparable only under the same SLOs."""
    if base is None or (base.get("slo_ms") or {}) == (cand.get("slo_ms") or {}):
        return
    used = [r.key for r in rules if uses_slo(r.key)]
    if used:
        raise ConfigError(
            f"{cand_path}: summarised with SLOs {cand.get('slo_ms')}, baseline {base_path} with "
            f"{base.get('slo_ms')}; rules on {', '.join(used)} need the same SLOs"
        )


def gate_command(
    baseline: Path | None, candidate: Path, rules_path: Path, junit: Path | None, markdown: Path | None, slo: str | None
) -> int:
    """Exit code: 0 every rule passes, 1 a rule fails (regression, limit, too few samples, missing value)."""
    from rich.console import Console
    from rich.markdown import Markdown

    rules = load_rules(rules_path)
    s = parse_slo(slo) if slo else None
    base = load_side(baseline, s if baseline and baseline.is_dir() else None) if baseline else None
    if s is None and base is not None:
        s = slo_from_ms(base.get("slo_ms"))  # judge a candidate run by the SLOs its baseline was summarised with
    cand = load_side(candidate, s if candidate.is_dir() else None)
    _check_same_slo(rules, base, cand, baseline, candidate)
    verdicts = evaluate(rules, base, cand, delta_for)
    title = f"kvbench gate: {candidate}" + (f" vs {baseline}" if baseline else "")
    md = to_markdown(verdicts, title)
    if markdown:
        _write(markdown, md)
    if junit:
        _write(junit, to_junit(verdicts))
    Console(file=sys.stdout, width=160).print(Markdown(md))
    return 0 if all(v.passed for v in verdicts) else 1
