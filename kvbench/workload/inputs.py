"""Locating and checking a workload's inputs: trace files, their content digest, and workload specs by name."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from kvbench.config import ConfigError


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def check_file(path: str | Path) -> Path:
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(f"{p}: is a directory, expected a trace file")
        if not p.is_file():
            raise ConfigError(f"{p}: no such file")
    except OSError as e:  # e.g. a name longer than the file system allows
        raise ConfigError(f"{str(p)[:200]}: cannot open: {e.strerror}") from None
    return p


def workload_dirs() -> list[Path]:
    """Where workload names are looked up: ./workloads (a local spec overrides a shipped one), then the package's."""
    return [Path.cwd() / "workloads", Path(str(resources.files("kvbench") / "presets" / "workloads"))]


def find_workload(ref: str, base: Path | None = None) -> Path:
    """A spec path (relative to `base` when given, else the cwd) or a NAME in the workload dirs."""
    if ref.endswith(".toml") or "/" in ref:
        p = (base / ref) if base is not None and not Path(ref).is_absolute() else Path(ref)
        if not p.is_file():
            raise ConfigError(f"{p}: no such workload spec")
        return p
    dirs = ([base] if base is not None else []) + workload_dirs()
    for d in dirs:
        if (d / f"{ref}.toml").is_file():
            return d / f"{ref}.toml"
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    raise ConfigError(f"unknown workload {ref!r}; known: {', '.join(known) or '(none found)'}")
