"""`kvbench compare`: per-metric differences between two runs (or summary.json files) with bootstrap intervals."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvbench.analysis.bootstrap import LEVEL, RESAMPLES, delta_ci, has_ci
from kvbench.analysis.catalogue import Direction, direction_of, headline_keys
from kvbench.analysis.slo import Slo, parse_slo
from kvbench.config import ConfigError
from kvbench.present import fmt, summary


@dataclass(frozen=True)
class Delta:
    metric: str
    base: float | None
    cand: float | None
    delta: float | None  # cand - base
    rel: float | None  # delta / |base|
    ci: tuple[float, float] | None  # LEVEL interval of delta (bootstrap), None when the metric has no samples

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes zero; None without an interval."""
        return None if self.ci is None else not (self.ci[0] <= 0 <= self.ci[1])


def split_key(key: str) -> tuple[str, str]:
    """'ttft_ms.p99.9' -> ('ttft_ms', 'p99.9'); 'slo_attainment' -> ('slo_attainment', 'mean')."""
    name, _, stat = key.partition(".")
    return (name, stat) if stat else (name, "mean")


def load_side(path: str | Path, slo: Slo | None = None) -> dict[str, Any]:
    """A summary document from a run directory (computed now) or a summary.json file."""
    p = Path(path)
    if p.is_dir():
        return summary.build(p, slo)
    if not p.is_file():
        raise ConfigError(f"{p}: no such run directory or summary.json")
    if slo is not None:
        raise ConfigError(f"{p}: --slo applies to run directories only; a summary.json keeps the SLOs it was made with")
    return summary.load(p)


def delta_for(
    key: str, base: dict[str, Any], cand: dict[str, Any], resamples: int = RESAMPLES, level: float = LEVEL
) -> Delta:
    """The difference of one metric, with a bootstrap interval when both sides carry samples of it."""
    b, c = base["metrics"].get(key), cand["metrics"].get(key)
    if b is None or c is None:
        return Delta(key, b, c, None, None, None)
    d = c - b
    rel = d / abs(b) if b else None
    name, stat = split_key(key)
    ci = None
    if has_ci(name, stat):
        seed = zlib.crc32(key.encode())  # per metric, so an interval does not depend on which others are asked
        ci = delta_ci(
            base.get("samples", {}).get(name), cand.get("samples", {}).get(name), stat, d, seed, resamples, level
        )
    return Delta(key, b, c, d, rel, ci)


def compare(
    base: dict[str, Any], cand: dict[str, Any], keys: list[str] | None = None, resamples: int = RESAMPLES
) -> list[Delta]:
    """Deltas for `keys` (default: the catalogue's headline metrics either side has)."""
    if keys is None:
        keys = [k for k in headline_keys() if k in base["metrics"] or k in cand["metrics"]]
    return [delta_for(k, base, cand, resamples) for k in keys]


def verdict(d: Delta) -> str:
    """'better' / 'worse' only when the interval excludes zero (by the metric's direction); 'no significant change'
    when it does not; 'changed, no CI' without an interval; '' without a difference."""
    if d.delta is None or d.delta == 0:
        return ""
    if d.significant is None:
        return "changed, no CI"
    if not d.significant:
        return "no significant change"
    try:
        direction = direction_of(d.metric)
    except KeyError:  # a summary.json key the catalogue no longer has
        direction = Direction.NEITHER
    if direction is Direction.NEITHER:
        return "significant change"
    return "better" if (d.delta > 0) == (direction is Direction.HIGHER) else "worse"


def all_keys(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    return sorted(set(base["metrics"]) | set(cand["metrics"]))


def print_table(deltas: list[Delta], base_name: str, cand_name: str, resamples: int) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{cand_name} vs {base_name}",
        title_justify="left",
        caption=f"CI: {fmt.share(LEVEL)} bootstrap interval of (candidate - baseline), {resamples} seeded resamples "
        f"of per-request values; a change is called better or worse only when its interval excludes 0",
        caption_justify="left",
    )
    for col in ("metric", "baseline", "candidate", "delta", "delta %", "CI low", "CI high", "verdict"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for d in deltas:
        lo, hi = d.ci if d.ci else (None, None)
        t.add_row(
            d.metric,
            *(fmt.number(v, fmt.COMPARE) for v in (d.base, d.cand, d.delta)),
            fmt.percent(d.rel, 1, signed=True),
            *(fmt.number(v, fmt.COMPARE) for v in (lo, hi)),
            _styled(verdict(d)),
        )
    Console(width=140).print(t)


def _styled(text: str) -> str:
    colour = {"better": "green", "worse": "red"}.get(text)
    return f"[{colour}]{text}[/{colour}]" if colour else text


def compare_command(base: Path, cand: Path, slo: str | None, resamples: int, json_out: bool, all_metrics: bool) -> None:
    if resamples < 10:
        raise ConfigError(f"--resamples must be >= 10, got {resamples}")
    s = parse_slo(slo) if slo else None
    b, c = load_side(base, s), load_side(cand, s)
    deltas = compare(b, c, all_keys(b, c) if all_metrics else None, resamples)
    if json_out:
        import json

        print(
            json.dumps(
                {
                    "baseline": str(base),
                    "candidate": str(cand),
                    "level": LEVEL,
                    "resamples": resamples,
                    "deltas": [asdict(d) for d in deltas],
                },
                indent=1,
            )
        )
    else:
        print_table(deltas, str(base), str(cand), resamples)
