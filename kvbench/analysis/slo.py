"""Per-request SLO thresholds: parsed from --slo text or run.json / summary.json, bound into per_request.sql."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from kvbench.config import ConfigError
from kvbench.units import ms_to_ns

_SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms", "tbt": "tbt_ms"}


@dataclass(frozen=True)
class Slo:
    """Per-request SLO thresholds in ms (None: not checked). vLLM's keys ttft, tpot, e2el plus Mooncake's tbt."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    tbt_ms: float | None = None

    def params(self) -> dict[str, int | None]:
        """Bound parameters of per_request.sql ($ttft_ns, $tpot_ns, $e2el_ns, $tbt_ns)."""
        return {
            f"{k}_ns": None if getattr(self, v) is None else ms_to_ns(getattr(self, v)) for k, v in _SLO_KEYS.items()
        }

    def as_ms(self) -> dict[str, float]:
        return {k: getattr(self, v) for k, v in _SLO_KEYS.items() if getattr(self, v) is not None}

    def __bool__(self) -> bool:
        return any(v is not None for v in asdict(self).values())


MAX_SLO_MS = 1e9  # about 11.6 days: larger thresholds are unit mix-ups


def parse_slo(text: str, option: str = "--slo") -> Slo:
    """'ttft=200,tpot=50' -> Slo(ttft_ms=200, tpot_ms=50). Keys ttft, tpot, e2el, tbt; values in ms (also 'ttft:200').
    `option` names the flag in errors (replay's --slo is also vLLM's --goodput)."""
    values: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([a-z0-9_]+)\s*[=:]\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ms)?", item.lower())
        if not m:
            raise ConfigError(
                f"{option} {text!r}: cannot parse {item!r}; expected KEY=MS or KEY:MS, e.g. ttft=200,tpot=50"
            )
        key = m.group(1).removesuffix("_ms")
        if key not in _SLO_KEYS:
            raise ConfigError(f"{option} {text!r}: unknown key {key!r}; allowed: {', '.join(_SLO_KEYS)}")
        if key in values:
            raise ConfigError(f"{option} {text!r}: {key!r} given twice")
        value = float(m.group(2))
        if not 0 < value <= MAX_SLO_MS:
            raise ConfigError(
                f"{option} {text!r}: {key}: expected milliseconds > 0 and <= {MAX_SLO_MS:g}, got {m.group(2)}"
            )
        values[key] = value
    if not values:
        raise ConfigError(f"{option} {text!r}: no threshold given; expected KEY=MS or KEY:MS, e.g. ttft=200,tpot=50")
    return Slo(**{_SLO_KEYS[k]: v for k, v in values.items()})


def slo_from_ms(declared: dict[str, Any] | None) -> Slo:
    """An Slo from {"ttft": ms, ...} (run.json workload.slo_ms, summary.json slo_ms); unknown keys are ignored."""
    declared = declared or {}
    return Slo(**{_SLO_KEYS[k]: float(v) for k, v in declared.items() if k in _SLO_KEYS and v is not None})


def slo_from_manifest(manifest: dict[str, Any]) -> Slo:
    """SLOs the run's workload declared (run.json workload.slo_ms)."""
    return slo_from_ms((manifest.get("workload") or {}).get("slo_ms"))
