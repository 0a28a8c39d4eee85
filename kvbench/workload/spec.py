"""Workload specs: TOML in workloads/ parsed into frozen dataclasses; errors name file:line:key.

Paths inside a spec are relative to the spec file, so `../../shared/traces/...` works from workloads/.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError, check_keys, load_toml, where
from kvbench.workload.arrivals import ArrivalSpec
from kvbench.workload.dists import LengthSpec
from kvbench.workload.inputs import find_workload
from kvbench.workload.synth import PrefixSpec, SessionSpec

KINDS = ("trace", "synthetic", "servegen", "mix")
FORMATS = ("auto", "mooncake", "azure", "sharegpt", "lengths")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms", "tbt_ms", "itl_ms")
TOP_KEYS = (
    "name",
    "description",
    "kind",
    "path",
    "format",
    "requests",
    "duration_s",
    "start_s",
    "time_scale",
    "clients",
    "rate_scale",
    "arrivals",
    "input",
    "output",
    "prefix",
    "sessions",
    "slo",
    "components",
)
COMPONENT_KEYS = ("workload", "weight", "name")


@dataclass(frozen=True)
class Component:
    spec: WorkloadSpec
    weight: float
    name: str


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    source: str  # the spec file
    kind: str
    path: str = ""  # trace file or ServeGen folder, resolved against the spec file
    format: str = "auto"
    requests: int | None = None
    duration_s: float | None = None
    start_s: float = 0.0
    time_scale: float = 1.0
    clients: tuple[int, ...] = ()
    rate_scale: float = 1.0
    arrivals: ArrivalSpec | None = None  # None: as recorded (traces) / Poisson 1 req/s (generated)
    input: LengthSpec = field(default_factory=LengthSpec)
    output: LengthSpec | None = None  # None: a reader's own lengths, else the chat default (see build)
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    sessions: SessionSpec = field(default_factory=SessionSpec)
    slo_ms: tuple[tuple[str, float], ...] = ()
    components: tuple[Component, ...] = ()


def _typed(value: Any, default: Any, ctx: str) -> Any:
    """Check a TOML value against the type of the dataclass default; ints are accepted where floats are."""
    if default is None:  # optional numbers (reason_ratio)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{ctx}: expected a number, got {value!r}")
        return float(value)
    if isinstance(default, tuple):  # lists of numbers or of [number, number] pairs
        if not isinstance(value, list) or not all(
            _is_num(v) or isinstance(v, list) and len(v) == 2 and all(_is_num(x) for x in v) for v in value
        ):
            raise ConfigError(f"{ctx}: expected a list of numbers or of [number, number] pairs, got {value!r}")
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    ok = isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ConfigError(f"{ctx}: expected {type(default).__name__}, got {value!r}")
    return value


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _section(cls, data: Any, path: Path, text: str, name: str, resolve_path: bool = False):
    """Build dataclass `cls` from TOML table `data`, rejecting unknown keys and mistyped values."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where(path, text, name)}: [{name}] must be a table")
    check_keys(data, [f.name for f in dataclasses.fields(cls)], path, text, name)
    defaults = cls()
    kwargs = {
        k: _typed(v, getattr(defaults, k), f"{where(path, text, f'{name}.{k}')}: {name}.{k}") for k, v in data.items()
    }
    if resolve_path and kwargs.get("path"):
        kwargs["path"] = str((path.parent / kwargs["path"]).resolve())  # relative to the spec file
    return cls(**kwargs)


def _number(data: dict, key: str, path: Path, text: str, kind=float, minimum: float = 0.0, default=None):
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ConfigError(f"{where(path, text, key)}: {key}: expected {kind.__name__}, got {value!r}")
    if not minimum <= value < float("inf"):
        raise ConfigError(f"{where(path, text, key)}: {key}: expected a finite number >= {minimum}, got {value!r}")
    return kind(value)


def load_spec(path: str | Path, seen: tuple[Path, ...] = ()) -> WorkloadSpec:
    """Parse and validate one workload spec (and, for mixtures, its components)."""
    p = Path(path).resolve()
    if p in seen:
        raise ConfigError(f"{p}: mixture refers to itself through {', '.join(s.name for s in seen)}")
    data, text = load_toml(p)
    check_keys(data, TOP_KEYS, p, text)
    kind = data.get("kind", "trace")
    if kind not in KINDS:
        raise ConfigError(f"{where(p, text, 'kind')}: kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    fmt = data.get("format", "auto")
    if fmt not in FORMATS:
        raise ConfigError(f"{where(p, text, 'format')}: format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    name = data.get("name", p.stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where(p, text, 'name')}: name: expected a non-empty string")
    raw_path = data.get("path", "")
    if not isinstance(raw_path, str):
        raise ConfigError(f"{where(p, text, 'path')}: path: expected a string (relative to the spec file)")
    if kind in ("trace", "servegen") and not raw_path:
        raise ConfigError(f"{p}: path: required for kind = {kind!r}")
    if raw_path and not (p.parent / raw_path).exists():
        raise ConfigError(
            f"{where(p, text, 'path')}: path: {(p.parent / raw_path).resolve()} does not exist "
            f"(paths are relative to the spec file)"
        )
    at = where(p, text, "arrivals")
    return WorkloadSpec(
        name=name,
        source=str(p),
        kind=kind,
        path=str((p.parent / raw_path).resolve()) if raw_path else "",
        format=fmt,
        requests=_number(data, "requests", p, text, int, 1),
        duration_s=_number(data, "duration_s", p, text, float, 0.0),
        start_s=_number(data, "start_s", p, text, float, 0.0, 0.0),
        time_scale=_number(data, "time_scale", p, text, float, 1e-9, 1.0),
        clients=_clients(data, p, text),
        rate_scale=_number(data, "rate_scale", p, text, float, 0.0, 1.0),
        arrivals=_section(ArrivalSpec, data["arrivals"], p, text, "arrivals").validate(at)
        if "arrivals" in data
        else None,
        input=_lengths(data, "input", p, text) or LengthSpec(),
        output=_lengths(data, "output", p, text),
        prefix=_section(PrefixSpec, data.get("prefix", {}), p, text, "prefix").validate(where(p, text, "prefix")),
        sessions=_section(SessionSpec, data.get("sessions", {}), p, text, "sessions").validate(
            where(p, text, "sessions")
        ),
        slo_ms=_slo(data, p, text),
        components=_components(data, p, text, seen + (p,)) if kind == "mix" else (),
    )


def _lengths(data: dict, role: str, p: Path, text: str) -> LengthSpec | None:
    if role not in data:
        return None
    spec = _section(LengthSpec, data[role], p, text, role, resolve_path=True)
    if spec.path and not Path(spec.path).exists():
        raise ConfigError(f"{where(p, text, role + '.path')}: {role}.path: {spec.path} does not exist")
    return spec.validate(where(p, text, role), role)


def _clients(data: dict, p: Path, text: str) -> tuple[int, ...]:
    value = data.get("clients", [])
    if not isinstance(value, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
        raise ConfigError(f"{where(p, text, 'clients')}: clients: expected a list of client ids (integers >= 0)")
    return tuple(value)


def _slo(data: dict, p: Path, text: str) -> tuple[tuple[str, float], ...]:
    slo = data.get("slo", {})
    if not isinstance(slo, dict):
        raise ConfigError(f"{where(p, text, 'slo')}: [slo] must be a table")
    check_keys(slo, SLO_KEYS, p, text, "slo")
    for key, value in slo.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where(p, text, 'slo.' + key)}: slo.{key}: expected milliseconds > 0, got {value!r}")
    return tuple((k, float(v)) for k, v in slo.items())


def _components(data: dict, p: Path, text: str, seen: tuple[Path, ...]) -> tuple[Component, ...]:
    comps = data.get("components")
    if not isinstance(comps, list) or not comps:
        raise ConfigError(f"{where(p, text, 'components')}: kind = 'mix' needs [[components]] with workload and weight")
    out = []
    for i, c in enumerate(comps):
        if not isinstance(c, dict):
            raise ConfigError(f"{where(p, text, 'components')}: components[{i}]: expected a table")
        check_keys(c, COMPONENT_KEYS, p, text, "components")
        ref = c.get("workload")
        if not isinstance(ref, str):
            raise ConfigError(f"{where(p, text, 'workload')}: components[{i}].workload: expected a name or path")
        weight = _number(c, "weight", p, text, float, 0.0, 1.0)
        sub = load_spec(find_workload(ref, p.parent), seen)
        name = c.get("name", sub.name)
        if not isinstance(name, str):
            raise ConfigError(f"{where(p, text, 'name')}: components[{i}].name: expected a string")
        out.append(Component(sub, weight, name))
    return tuple(out)
