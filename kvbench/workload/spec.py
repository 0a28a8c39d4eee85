"""Workload specs: TOML in workloads/ read into frozen dataclasses; errors name file:line and the key.

Paths inside a spec are relative to the spec file, so the shipped specs (kvbench/presets/workloads/) reach a
checkout's `../shared/traces/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Literal

from kvbench.config import ConfigError, Range, Source, apply_overrides, load_toml, read
from kvbench.workload.arrivals import ArrivalSpec
from kvbench.workload.dists import LengthSpec
from kvbench.workload.inputs import find_workload
from kvbench.workload.synth import PrefixSpec, SessionSpec
from kvbench.workload.tokens import Tokenizer

MAX_SLO_MS = 1e9  # about 11.6 days: larger thresholds are unit mix-ups
Ms = Annotated[float, Range(0, MAX_SLO_MS, open_lo=True)]


@dataclass(frozen=True)
class Slo:
    """[slo]: latency objectives in milliseconds the workload declares (each optional)."""

    ttft_ms: Ms | None = None
    tpot_ms: Ms | None = None
    e2el_ms: Ms | None = None
    tbt_ms: Ms | None = None
    itl_ms: Ms | None = None


@dataclass(frozen=True)
class ComponentFile:
    """One [[components]] table of a mixture."""

    workload: str  # a workload name or a spec path (relative to this spec)
    weight: Annotated[float, Range(0)] = 1.0
    name: str | None = None  # default: the component workload's name


@dataclass(frozen=True)
class SpecFile:
    """A workload spec file's keys as written; load_spec resolves paths, mixtures and defaults from it."""

    name: str | None = None  # default: the file's stem
    description: str = ""
    kind: Literal["trace", "synthetic", "servegen", "mix"] = "trace"
    path: str = ""  # trace file or ServeGen folder, relative to the spec file
    format: Literal["auto", "mooncake", "azure", "sharegpt", "lengths"] = "auto"
    tokenizer: str = ""  # a tokenizer.json (or its folder) counting a text trace's tokens, relative to the spec file
    requests: Annotated[int, Range(1)] | None = None
    duration_s: Annotated[float, Range(0)] | None = None
    start_s: Annotated[float, Range(0)] = 0.0
    time_scale: Annotated[float, Range(1e-9)] = 1.0
    clients: tuple[Annotated[int, Range(0)], ...] = ()
    rate_scale: Annotated[float, Range(0)] = 1.0
    arrivals: ArrivalSpec | None = None
    input: LengthSpec | None = None
    output: LengthSpec | None = None
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    sessions: SessionSpec = field(default_factory=SessionSpec)
    slo: Slo = field(default_factory=Slo)
    components: tuple[ComponentFile, ...] = ()


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
    tokenizer: Tokenizer = ""  # a tokenizer.json (resolved) or a server's /tokenize; "": ceil(characters / 4)
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


def load_spec(path: str | Path, seen: tuple[Path, ...] = (), overrides: tuple[str, ...] = ()) -> WorkloadSpec:
    """Parse and validate one workload spec (and, for mixtures, its components); `overrides` are dotted
    KEY=VALUE settings applied to the file's keys first (a sweep's workload axes)."""
    p = Path(path).resolve()
    if p in seen:
        raise ConfigError(f"{p}: mixture refers to itself through {', '.join(s.name for s in seen)}")
    data, text = load_toml(p)
    data = apply_overrides(data, overrides)
    src = Source(str(p), text)
    f = read(SpecFile, data, src)
    if f.name == "":
        raise src.bad(("name",), "a non-empty string", f.name)
    if f.kind in ("trace", "servegen") and not f.path:
        raise src.error((), f"missing key 'path' (required for kind = {f.kind!r})")
    if f.path and not (p.parent / f.path).exists():
        raise src.error(
            ("path",), f"path: {(p.parent / f.path).resolve()} does not exist (paths are relative to the spec file)"
        )
    return WorkloadSpec(
        name=f.name or p.stem,
        source=str(p),
        kind=f.kind,
        path=str((p.parent / f.path).resolve()) if f.path else "",
        format=f.format,
        tokenizer=str((p.parent / f.tokenizer).resolve()) if f.tokenizer else "",
        requests=f.requests,
        duration_s=f.duration_s,
        start_s=f.start_s,
        time_scale=f.time_scale,
        clients=f.clients,
        rate_scale=f.rate_scale,
        arrivals=f.arrivals.validate(src.at(("arrivals",))) if f.arrivals else None,
        input=_lengths(f.input, "input", p, src) or LengthSpec(),
        output=_lengths(f.output, "output", p, src),
        prefix=f.prefix.validate(src.at(("prefix",))),
        sessions=f.sessions.validate(src.at(("sessions",))),
        slo_ms=tuple((k.name, v) for k in fields(Slo) if (v := getattr(f.slo, k.name)) is not None),
        components=_components(f, p, src, seen + (p,)) if f.kind == "mix" else (),
    )


def _lengths(spec: LengthSpec | None, role: str, p: Path, src: Source) -> LengthSpec | None:
    if spec is None:
        return None
    if spec.path:
        resolved = (p.parent / spec.path).resolve()  # relative to the spec file
        if not resolved.exists():
            raise src.error((role, "path"), f"{role}.path: {resolved} does not exist")
        spec = replace(spec, path=str(resolved))
    return spec.validate(src.at((role,)), role)


def _components(f: SpecFile, p: Path, src: Source, seen: tuple[Path, ...]) -> tuple[Component, ...]:
    if not f.components:
        raise src.error(("components",), "kind = 'mix' needs [[components]] with workload and weight")
    out = []
    for c in f.components:
        sub = load_spec(find_workload(c.workload, p.parent), seen)
        out.append(Component(sub, c.weight, sub.name if c.name is None else c.name))
    return tuple(out)
