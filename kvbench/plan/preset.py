"""A sim profile written back as TOML (the planner's candidates and its chosen deployment, which `--target` reads)."""

from __future__ import annotations

import json
from typing import Any


def to_toml(params: dict[str, Any], header: str = "") -> str:
    """TOML text of a profile: top-level values first, then one [table] per nested table (depth first)."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += _table(params, ())
    return "\n".join(lines).strip("\n") + "\n"


def _table(table: dict[str, Any], path: tuple[str, ...]) -> list[str]:
    lines = [f"{_key(k)} = {_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    if path and (lines or not any(isinstance(v, dict) for v in table.values())):  # [a] only holding [a.b]: implied
        lines = ["", f"[{'.'.join(_key(p) for p in path)}]", *lines]
    out = lines
    for k, v in table.items():
        if isinstance(v, dict):
            out += _table(v, (*path, k))
    return out


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as TOML")
