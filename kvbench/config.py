"""TOML config loading with errors that name the file, line and key; all config is validated at this edge."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Bad user input (config, trace, option). The CLI prints it as one line and exits 2."""


def line_of(text: str, key: str) -> int | None:
    """1-based line where `key = ...` (or a `[key]` table) first appears in TOML text, if found."""
    leaf = key.rsplit(".", 1)[-1]
    pat = re.compile(rf'^[ \t]*(?:"?{re.escape(leaf)}"?\s*=|\[+\s*{re.escape(key)}\s*\]+)', re.M)
    m = pat.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def where(path: str | Path, text: str, key: str) -> str:
    line = line_of(text, key)
    return f"{path}:{line}" if line else str(path)


def load_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """Parse a TOML file; returns (data, text). Syntax errors become ConfigError naming file and line."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, expected a TOML file")
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a text file (expected TOML)") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: TOML syntax error: {e}") from None


def check_keys(data: dict[str, Any], allowed: Iterable[str], path: str | Path, text: str, section: str = "") -> None:
    """Reject unknown keys, naming the file, line, key and the allowed set."""
    allowed = set(allowed)
    for key in data:
        if key not in allowed:
            full = f"{section}.{key}" if section else key
            raise ConfigError(f"{where(path, text, full)}: unknown key {full!r}; allowed: {', '.join(sorted(allowed))}")


def parse_override(item: str) -> tuple[list[str], Any]:
    """'router.cache_threshold=0.5' -> (['router', 'cache_threshold'], 0.5); values are TOML literals or bare strings."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set router.name=cache_aware")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """A copy of `data` with dotted-key overrides applied (the spec itself is never mutated)."""
    import copy

    out = copy.deepcopy(data)
    for item in items:
        keys, value = parse_override(item)
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {k!r} is not a table")
        node[keys[-1]] = value
    return out
