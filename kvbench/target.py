"""The one extension point: the Target protocol, how a --target string resolves, and the name -> factory dict."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvbench.config import ConfigError, apply_overrides, load_toml
from kvbench.records import Emit, Request

if TYPE_CHECKING:
    from kvbench.eventlog import EventLog


class Target(Protocol):
    """Something requests are replayed against.

    Contract (tests/test_target_contract.py checks it for every target):
    - `submit(req, at_ns)` may be called before `run` and from inside `emit` callbacks during `run`;
      `at_ns` is the intended release time (ns from run start, >= the time of the event being handled).
    - `run(emit)` releases each request at `at_ns` (emitting ARRIVE with t = at_ns, then SEND, ...) and returns
      once every submitted request has ended with exactly one terminal event (FINISH, ERROR, REJECT, CANCEL).
    - On KeyboardInterrupt, `run` emits CANCEL (detail "interrupted") for every request not yet ended, then re-raises.
    - CHUNK events may instead go straight to `ctx.log.emit_chunk((t_ns, req_id, tokens))` (never terminal; a
      real-time target's per-read event, kept off the replayer's callback).
    """

    def submit(self, req: Request, at_ns: int) -> None: ...

    def run(self, emit: Emit) -> None: ...


@dataclass(frozen=True)
class TargetSpec:
    kind: str  # key of TARGETS
    name: str  # preset / profile name or URL, for display
    params: dict[str, Any] = field(default_factory=dict)  # profile contents after --set overrides
    source: str = ""  # where it came from (file path or the --target string)

    def digest(self) -> str:
        blob = json.dumps({"kind": self.kind, "params": self.params}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunContext:
    seed: int
    run_dir: Path
    log: EventLog  # log.table("steps") etc. for target-specific tables
    t0_ns: int = 0  # time.monotonic_ns() at run start: real-time targets measure t_ns from it
    worker: int = 0
    workers: int = 1


def _sim(spec: TargetSpec, ctx: RunContext) -> Target:
    from kvbench.sim.target import SimTarget

    return SimTarget(spec, ctx)


def _openai(spec: TargetSpec, ctx: RunContext) -> Target:
    from kvbench.http.target import OpenAITarget

    return OpenAITarget(spec, ctx)


def _fixed(spec: TargetSpec, ctx: RunContext) -> Target:
    from kvbench.fixed_target import FixedTarget

    return FixedTarget(spec, ctx)


TARGETS: dict[str, Callable[[TargetSpec, RunContext], Target]] = {"sim": _sim, "openai": _openai, "fixed": _fixed}
REALTIME_KINDS = frozenset({"openai"})  # targets whose t_ns is wall-clock (flush the log every ~second)
DEFAULT_SIM_PRESET = "pd-2p2d"


def adapter_dirs() -> list[Path]:
    """Where profile names are looked up: ./adapters, then the adapters/ beside an editable install."""
    return [Path.cwd() / "adapters", Path(__file__).resolve().parents[1] / "adapters"]


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
        return TargetSpec("openai", arg, params, arg)
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
    if kind not in TARGETS:
        raise ConfigError(f"{path}: key 'kind' must be one of {', '.join(TARGETS)}, got {kind!r}")
    if arg.startswith("sim") and kind != "sim":
        raise ConfigError(f"{path}: {arg!r} names a {kind!r} profile, not a sim preset")
    return TargetSpec(kind, path.stem, apply_overrides(data, overrides), str(path))


def build(spec: TargetSpec, ctx: RunContext) -> Target:
    return TARGETS[spec.kind](spec, ctx)
