"""The targets there are: one dict kind -> Registration, and how a --target string resolves to a TargetSpec."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from kvbench.config import ConfigError, apply_overrides, load_toml
from kvbench.fixed_target import FixedTarget
from kvbench.redact import redact_url
from kvbench.target import Registration, RunContext, Target, TargetSpec

DEFAULT_SIM_PRESET = "pd-2p2d"


# The simulator's and the HTTP client's modules take ~50 and ~70 ms to import: only a run that uses one pays.
# The HTTP target's prepare step imports its modules before the run's t0.
def _sim(spec: TargetSpec, ctx: RunContext) -> Target:
    from kvbench.sim.target import SimTarget

    return SimTarget(spec, ctx)


def _openai(spec: TargetSpec, ctx: RunContext) -> Target:
    from kvbench.http.target import OpenAITarget

    return OpenAITarget(spec, ctx)


def _openai_prepare(spec: TargetSpec) -> TargetSpec:
    from kvbench.http.target import prepared_spec

    return prepared_spec(spec)


TARGETS: dict[str, Registration] = {
    "sim": Registration(_sim),
    "openai": Registration(_openai, _openai_prepare, realtime=True),
    "fixed": Registration(FixedTarget),
}


def registration(kind: str) -> Registration:
    if kind not in TARGETS:
        raise ConfigError(f"unknown target kind {kind!r}; known: {', '.join(TARGETS)}")
    return TARGETS[kind]


def build(spec: TargetSpec, ctx: RunContext) -> Target:
    return registration(spec.kind).factory(spec, ctx)


def adapter_dirs() -> list[Path]:
    """Where profile names are looked up: ./adapters (a local profile overrides a shipped one), then the package's."""
    return [Path.cwd() / "adapters", Path(str(resources.files("kvbench") / "presets" / "adapters"))]


def find_adapter(name: str) -> Path:
    for d in adapter_dirs():
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    known = sorted({p.stem for d in adapter_dirs() if d.is_dir() for p in d.glob("*.toml")})
    raise ConfigError(f"unknown target profile {name!r}; known: {', '.join(known) or '(none found)'}")


def resolve(arg: str, overrides: list[str] | tuple[str, ...] = ()) -> TargetSpec:
    """Turn a --target string into a spec: sim, sim:PRESET, fixed[:k=v,...], http(s)://URL, FILE.toml or NAME."""
    if arg.startswith(("http://", "https://")):
        params = apply_overrides({"kind": "openai", "base_url": arg.rstrip("/")}, overrides)
        shown = redact_url(arg)  # name and source are shown and recorded: never the URL's password
        return TargetSpec("openai", shown, params, shown)
    if arg == "fixed" or arg.startswith("fixed:"):
        pairs = [p for p in arg.partition(":")[2].split(",") if p]
        params = apply_overrides({"kind": "fixed"}, pairs + list(overrides))
        return TargetSpec("fixed", arg, params, arg)
    if arg == "sim" or arg.startswith("sim:"):
        path = find_adapter(arg.partition(":")[2] or DEFAULT_SIM_PRESET)
    elif arg.endswith(".toml") or "/" in arg:
        path = Path(arg)
    else:
        path = find_adapter(arg)
    data, _ = load_toml(path)
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in TARGETS:
        raise ConfigError(f"{path}: key 'kind' must be one of {', '.join(TARGETS)}, got {kind!r}")
    if arg.startswith("sim") and kind != "sim":
        raise ConfigError(f"{path}: {arg!r} names a {kind!r} profile, not a sim preset")
    return TargetSpec(kind, path.stem, apply_overrides(data, overrides), str(path))
