"""The config reader: TOML into frozen dataclasses, checked key by key, with errors naming the file, line and key.

A dataclass describes a table: its fields are the allowed keys, their types what each value must be (bool, int,
float, str, Literal choices, tuples as lists, dict[str, X] as tables, nested dataclasses as sub-tables, `X | None`
for optional keys) and `Annotated[..., Range(...)]` the bounds of a number. `read(cls, data, src)` builds it;
checks that involve several keys stay with the dataclass's module and raise through `src.error`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tomllib
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
KeyPath = tuple[str | int, ...]  # ("pools", "decode", "tp"), ("rule", 1, "max"): an int indexes an array of tables


class ConfigError(ValueError):
    """Bad user input (config, trace, option). The CLI prints it as one line and exits 2."""


@dataclass(frozen=True)
class Range:
    """Bounds of a number field: lo <= value (lo < value when open_lo) and value <= hi."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False

    def holds(self, value: float) -> bool:
        if self.lo is not None and (value < self.lo or (self.open_lo and value == self.lo)):
            return False
        return self.hi is None or value <= self.hi

    def text(self) -> str:
        parts = [] if self.lo is None else [f"{'>' if self.open_lo else '>='} {_bound(self.lo)}"]
        return " and ".join(parts + ([] if self.hi is None else [f"<= {_bound(self.hi)}"]))


def _bound(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"  # a whole-number bound in full: 16,777,216, not 1.67772e+07


@dataclass(frozen=True)
class NonEmpty:
    """A string field that must not be empty: Annotated[str, NonEmpty()]."""

    def holds(self, value: str) -> bool:
        return bool(value)


def dotted(path: KeyPath) -> str:
    """The key as a user writes it: array indexes left out (the line number tells which table)."""
    return ".".join(p for p in path if isinstance(p, str))


class Source:
    """Where config data came from, for errors: a file's name and text (lines are looked up in it), or a label
    such as '--target' for data from the command line."""

    def __init__(self, name: str, text: str = ""):
        self.name, self.text = name, text
        self._lines: dict[KeyPath, int] | None = None

    @classmethod
    def of(cls, name: str | Path) -> Source:
        """The source named `name`, with the file's text when `name` is a TOML file (line numbers), else a label."""
        p = Path(name)
        text = p.read_text(encoding="utf-8") if str(name).endswith(".toml") and p.is_file() else ""
        return cls(str(name), text)

    def line(self, path: KeyPath) -> int | None:
        """1-based line of the key or table at `path`, else of its nearest enclosing one written in the file."""
        if self._lines is None:
            self._lines = _index_lines(self.text)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None

    def at(self, path: KeyPath) -> str:
        line = self.line(path)
        return f"{self.name}:{line}" if line else self.name

    def error(self, path: KeyPath, message: str) -> ConfigError:
        return ConfigError(f"{self.at(path)}: {message}")

    def bad(self, path: KeyPath, what: str, value: Any) -> ConfigError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else f"{shown[:60]}... ({len(shown)} characters)"
        return self.error(path, f"{dotted(path)} must be {what}, got {shown}")


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]#]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def _split_key(key: str) -> tuple[str, ...]:
    return tuple(k.strip().strip("\"'") for k in re.findall(r""""[^"]*"|'[^']*'|[^.]+""", key))


def _index_lines(text: str) -> dict[KeyPath, int]:
    """KeyPath -> line for every table header and key of a TOML text (not inside multi-line values)."""
    lines: dict[KeyPath, int] = {}
    counts: dict[tuple[str, ...], int] = {}
    table: KeyPath = ()
    depth, quote = 0, ""
    for n, raw in enumerate(text.splitlines(), 1):
        if quote or depth:  # inside a multi-line string or array / inline table
            depth, quote = _scan(raw, depth, quote)
            continue
        header = _HEADER.match(raw)
        key = None if header else _KEY.match(raw)
        if header:
            name = _split_key(header.group(2))
            if header.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                table = (*name, counts[name])
            else:
                table = _resolve_arrays(name, counts)
            lines.setdefault(table, n)
        elif key:
            lines.setdefault((*table, *_split_key(key.group(1))), n)
            depth, quote = _scan(raw[key.end() :], 0, "")
    return lines


def _resolve_arrays(name: tuple[str, ...], counts: dict[tuple[str, ...], int]) -> KeyPath:
    """[rule.limits] after [[rule]] belongs to the latest rule: insert the array indexes of its prefixes."""
    out: list[str | int] = []
    for i, part in enumerate(name):
        out.append(part)
        if name[: i + 1] in counts and i + 1 < len(name):
            out.append(counts[name[: i + 1]])
    return tuple(out)


def _scan(s: str, depth: int, quote: str) -> tuple[int, str]:
    """Bracket depth and open multi-line quote after `s`, given those before it (strings and comments skipped)."""
    i = 0
    while i < len(s):
        if quote:
            end = s.find(quote, i)
            if end < 0:
                return depth, quote
            i, quote = end + len(quote), ""
            continue
        c = s[i]
        if c == "#":
            break
        if s.startswith(('"""', "'''"), i):
            quote, i = s[i : i + 3], i + 3
        elif c in "\"'":
            end = s.find(c, i + 1)
            i = len(s) if end < 0 else end + 1
        else:
            depth += (c in "[{") - (c in "]}")
            i += 1
    return depth, quote


def read(cls: type[T], data: Any, src: Source, at: KeyPath = (), ignore: Iterable[str] = ()) -> T:
    """The frozen dataclass `cls` built from TOML table `data` at `at`: unknown keys (other than `ignore`),
    missing required keys and values of the wrong type or out of range raise one-line ConfigErrors."""
    if not isinstance(data, dict):
        raise src.bad(at, "a table", data)
    hints = get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    reject_unknown(data, set(fields) | set(ignore), src, at)
    for name, f in fields.items():
        if name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise src.error(at, f"missing key {dotted((*at, name))!r}")
    values = {k: read_value(hints[k], v, src, (*at, k)) for k, v in data.items() if k in fields}
    return cls(**values)


def reject_unknown(data: dict[str, Any], allowed: Iterable[str], src: Source, at: KeyPath = ()) -> None:
    """Raise for the first key of table `data` not in `allowed`, naming its line and the allowed keys."""
    allowed = set(allowed)
    for key in data:
        if key not in allowed:
            path = (*at, key)
            raise src.error(path, f"unknown key {dotted(path)!r}; allowed: {', '.join(sorted(allowed))}")


def read_value(tp: Any, v: Any, src: Source, path: KeyPath) -> Any:
    """`v` checked against type `tp` (see the module docstring); lists become tuples."""
    if _fits(tp, v):
        return _convert(tp, v, src, path)
    tp = _unwrap_optional(tp)
    if (get_origin(tp) is dict or tp is dict) and isinstance(v, dict):  # name the entry that is wrong
        item = get_args(tp)[1] if get_args(tp) else Any
        for k, x in v.items():
            if isinstance(k, str) and not _fits(item, x):
                raise src.bad((*path, k), describe(item), x)
    raise src.bad(path, describe(tp), v)


def _unwrap_optional(tp: Any) -> Any:
    args = [a for a in get_args(tp) if a is not type(None)]
    return args[0] if get_origin(tp) in (Union, types.UnionType) and len(args) == 1 else tp


def _finite(v: int | float) -> bool:
    """A finite float, or an int that fits int64 (larger ones overflow the columns and float conversions)."""
    return -(2**63) < v < 2**63 if isinstance(v, int) else math.isfinite(v)


def _fits(tp: Any, v: Any) -> bool:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _fits(args[0], v) and all(m.holds(v) for m in args[1:] if isinstance(m, (Range, NonEmpty)))
    if origin in (Union, types.UnionType):
        return any(_fits(a, v) for a in args if a is not type(None))
    if tp is Any or dataclasses.is_dataclass(tp):
        return True  # a nested table is checked by its own read
    if origin is Literal:
        return v in args
    if tp is bool or tp is str:
        return isinstance(v, tp)
    if tp is int or tp is float:
        return isinstance(v, (int, float) if tp is float else int) and not isinstance(v, bool) and _finite(v)
    if origin is tuple:
        if not isinstance(v, list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(args[0], x) for x in v)
        return len(v) == len(args) and all(_fits(a, x) for a, x in zip(args, v))
    if origin is dict or tp is dict:
        item = args[1] if args else Any
        return isinstance(v, dict) and all(isinstance(k, str) and _fits(item, x) for k, x in v.items())
    raise TypeError(f"config type {tp!r} is not supported")


def _convert(tp: Any, v: Any, src: Source, path: KeyPath) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _convert(args[0], v, src, path)
    if origin in (Union, types.UnionType):
        return _convert(next(a for a in args if a is not type(None) and _fits(a, v)), v, src, path)
    if dataclasses.is_dataclass(tp):
        return read(tp, v, src, path)  # type: ignore[arg-type]
    if tp is float:
        return float(v)
    if origin is tuple:
        items = [args[0]] * len(v) if args[-1] is Ellipsis else list(args)
        return tuple(_convert(a, x, src, (*path, i)) for i, (a, x) in enumerate(zip(items, v)))
    if origin is dict or tp is dict:
        item = args[1] if args else Any
        return {k: _convert(item, x, src, (*path, k)) for k, x in v.items()}
    return v


def describe(tp: Any) -> str:
    """What a value of type `tp` must be, for errors: 'a whole number >= 0', 'a list of strings', ..."""
    return _noun(tp, plural=False)


def _noun(tp: Any, plural: bool) -> str:
    origin, args = get_origin(tp), get_args(tp)
    s = "s" if plural else ""
    if origin is Annotated:
        noun = _noun(args[0], plural)
        if any(isinstance(m, NonEmpty) for m in args[1:]):
            noun = "non-empty strings" if plural else "a non-empty string"
        bounds = " ".join(m.text() for m in args[1:] if isinstance(m, Range))
        return f"{noun} {bounds}".rstrip()
    if origin in (Union, types.UnionType):
        return " or ".join(_noun(a, plural) for a in args if a is not type(None))
    if origin is Literal:
        return f"one of {', '.join(map(str, args))}"
    if tp is bool:
        return "true or false"
    names = {int: "whole number", float: "number", str: "string"}
    if tp in names:
        return f"{'' if plural else 'a '}{names[tp]}{s}"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"{'lists' if plural else 'a list'} of {_noun(args[0], plural=True)}"
    if origin is tuple:
        return f"{'' if plural else 'a '}[{', '.join(_noun(a, False).removeprefix('a ') for a in args)}] pair{s}"
    if (origin is dict or tp is dict) and args and args[1] is not Any:
        return f"{'tables' if plural else 'a table'} of {_noun(args[1], plural=True)}"
    return "tables" if plural else "a table"


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
