"""Readers of CSV traces: Azure LLM inference (wall-clock arrivals) and length-only CSVs (Sarathi-Serve / Vidur)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import NS_PER_S
from kvbench.workload.inputs import check_file

MAX_TOKENS = 10_000_000  # same bound as the Mooncake reader: above it is a unit or column mix-up
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
_EPOCH = datetime(1970, 1, 1)
MAX_SPAN_NS = 365 * 86_400 * NS_PER_S


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row; the header must hold the required columns."""
    raw = check_file(path).read_bytes()
    if b"\0" in raw[:65536]:
        raise ConfigError(f"{path}: binary data, expected a CSV file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text, expected a CSV file") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header:
        raise ConfigError(f"{path}: empty file, expected a CSV header with {', '.join(required)}")
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise ConfigError(f"{path}:1: missing column {missing[0]!r}; expected columns {', '.join(required)}")
    while True:
        try:
            row = next(reader, None)
        except csv.Error as e:  # e.g. a field longer than the csv module's limit, an unclosed quote
            raise ConfigError(f"{path}:{reader.line_num}: not a valid CSV row: {e}") from None
        if row is None:
            return
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ConfigError(f"{path}:{reader.line_num}: {len(row)} fields, header has {len(header)}")
        yield reader.line_num, dict(zip(header, row))


def _tokens(row: dict[str, str], key: str, where: str, minimum: int) -> int:
    text = row[key].strip()
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise ConfigError(f"{where}: field {key!r}: expected a whole number of tokens, got {text!r}") from None
    if isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{where}: field {key!r}: expected a whole number of tokens, got {text!r}")
    if not minimum <= value <= MAX_TOKENS:
        raise ConfigError(f"{where}: field {key!r}: expected {minimum}..{MAX_TOKENS}, got {text!r}")
    return int(value)


def wall_clock_ns(text: str, where: str) -> int:
    """'2023-11-16 18:15:46.6805900' -> ns since 1970 (no time zone: only differences are used)."""
    whole, _, frac = text.strip().partition(".")
    try:
        dt = datetime.fromisoformat(whole)
    except ValueError:
        dt = None
    if dt is None or dt.tzinfo is not None or not frac.isdigit() and frac:
        raise ConfigError(f"{where}: field 'TIMESTAMP': expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got {text!r}")
    seconds = (dt - _EPOCH) // _ONE_SECOND
    return seconds * NS_PER_S + int(frac.ljust(9, "0")[:9] or 0)


def _offset_ns(t_ns: int, first_ns: int, where: str) -> int:
    """Arrival offset from the first row (negative for rows out of order, repaired later); a year at most."""
    offset = t_ns - first_ns
    if not -MAX_SPAN_NS <= offset <= MAX_SPAN_NS:
        raise ConfigError(
            f"{where}: field 'TIMESTAMP': {offset / NS_PER_S:.6g} s from the first row; expected at most "
            f"{MAX_SPAN_NS // NS_PER_S} s (a year) either way"
        )
    return offset


_ONE_SECOND = datetime(1970, 1, 1, 0, 0, 1) - _EPOCH


def read_azure(path: str | Path) -> list[Request]:
    """Azure LLM inference CSV -> requests with arrival = offset from the first row's TIMESTAMP (file order)."""
    p = Path(path)
    out: list[Request] = []
    first_ns = None
    for line, row in _rows(p, AZURE_COLUMNS):
        where = f"{p}:{line}"
        t_ns = wall_clock_ns(row["TIMESTAMP"], where)
        if first_ns is None:
            first_ns = t_ns
        n_in = _tokens(row, "ContextTokens", where, 1)
        n_out = _tokens(row, "GeneratedTokens", where, 0)
        out.append(Request(len(out), _offset_ns(t_ns, first_ns, where), n_in, n_out))
    if not out:
        raise ConfigError(f"{p}: empty trace (a header but no rows)")
    return out


def read_lengths(path: str | Path) -> list[tuple[int, int]]:
    """Length-only CSV -> [(input_tokens, output_tokens)] in file order (arrivals come from the workload spec)."""
    p = Path(path)
    out = []
    for line, row in _rows(p, LENGTH_COLUMNS):
        where = f"{p}:{line}"
        out.append((_tokens(row, "num_prefill_tokens", where, 1), _tokens(row, "num_decode_tokens", where, 0)))
    if not out:
        raise ConfigError(f"{p}: empty trace (a header but no rows)")
    return out
