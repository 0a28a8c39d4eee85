"""Reader for Mooncake/Kimi JSONL traces (FAST'25 release): timestamp ms, input/output length, 512-token hash_ids."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import orjson

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import MOONCAKE_BLOCK_TOKENS, NS_PER_MS

MAX_TOKENS = 10_000_000  # longer than any context window: a value above it is a unit or field mix-up


def _field_int(rec: dict, key: str, where: str, minimum: int = 0) -> int:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: field {key!r}: expected a number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{where}: field {key!r}: expected a whole number, got {value!r}")
    if not minimum <= value <= MAX_TOKENS:
        raise ConfigError(f"{where}: field {key!r}: expected {minimum}..{MAX_TOKENS}, got {value!r}")
    return int(value)


def parse_line(line: bytes, where: str, req_id: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Request:
    """One JSONL record -> Request; `where` is 'file:line' for error messages."""
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"{where}: invalid JSON ({e.msg if hasattr(e, 'msg') else e})") from None
    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
    ts = rec.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise ConfigError(f"{where}: field 'timestamp': expected milliseconds >= 0, got {ts!r}")
    n_in = _field_int(rec, "input_length", where, 1)
    n_out = _field_int(rec, "output_length", where, 0)
    hashes = rec.get("hash_ids", [])
    if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        raise ConfigError(f"{where}: field 'hash_ids': expected a list of integers")
    if hashes and len(hashes) != -(-n_in // block_tokens):
        raise ConfigError(f"{where}: field 'hash_ids': {len(hashes)} ids, but input_length {n_in} needs "
                          f"ceil({n_in}/{block_tokens}) = {-(-n_in // block_tokens)} blocks")
    arrival_ns = int(ts) * NS_PER_MS if isinstance(ts, int) else int(round(ts * NS_PER_MS))
    return Request(req_id, arrival_ns, n_in, n_out, tuple(hashes), block_tokens)


def read_mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Iterator[Request]:
    """Stream requests in file order. Raises ConfigError naming file, line and field for bad input.

    Timestamps must not decrease; callers that want the documented repair (sorting) use `load_sorted`.
    """
    p = Path(path)
    last_ns, req_id = -1, 0
    with open(p, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if b"\0" in line:
                raise ConfigError(f"{p}:{lineno}: binary data, expected JSON lines")
            req = parse_line(line, f"{p}:{lineno}", req_id, block_tokens)
            if req.arrival_ns < last_ns:
                raise UnsortedTrace(f"{p}:{lineno}: field 'timestamp' goes back in time "
                                    f"({req.arrival_ns // NS_PER_MS} ms after {last_ns // NS_PER_MS} ms)")
            last_ns = req.arrival_ns
            req_id += 1
            yield req
    if req_id == 0:
        raise ConfigError(f"{p}: empty trace (no records)")


class UnsortedTrace(ConfigError):
    """Timestamps decrease somewhere; the repair is to sort (stable) and warn."""
