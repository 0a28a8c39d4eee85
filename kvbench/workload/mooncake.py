"""Reader for Mooncake/Kimi JSONL traces (FAST'25 release): timestamp ms, input/output length, 512-token hash_ids."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path

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


def parse_line(
    line: bytes, where: str, req_id: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS, name: str = ""
) -> Request:
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
        raise ConfigError(
            f"{where}: field 'hash_ids': {len(hashes)} ids, but input_length {n_in} needs "
            f"ceil({n_in}/{block_tokens}) = {-(-n_in // block_tokens)} blocks"
        )
    arrival_ns = int(ts) * NS_PER_MS if isinstance(ts, int) else int(round(ts * NS_PER_MS))
    if len(rec) > 4 and "session_id" in rec:
        return _with_session(
            rec, where, Request(req_id, arrival_ns, n_in, n_out, tuple(hashes), block_tokens, workload=name)
        )
    return Request(req_id, arrival_ns, n_in, n_out, tuple(hashes), block_tokens, workload=name)


def _with_session(rec: dict, where: str, req: Request) -> Request:
    """kvbench's optional extension keys (written by `trace gen` for sessions and long-CoT mixes)."""
    sid = _field_int(rec, "session_id", where, -1)
    turn = _field_int(rec, "turn", where, 0) if "turn" in rec else 0
    think = rec.get("think_ms", 0)
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not 0 <= think < 1e9:
        raise ConfigError(f"{where}: field 'think_ms': expected milliseconds >= 0, got {think!r}")
    reason = _field_int(rec, "reason_tokens", where, 0) if "reason_tokens" in rec else 0
    if reason > req.output_tokens:
        raise ConfigError(f"{where}: field 'reason_tokens': {reason} exceeds output_length {req.output_tokens}")
    return req._replace(session_id=sid, turn=turn, think_ns=int(round(think * NS_PER_MS)), reason_tokens=reason)


_new_request = tuple.__new__  # Request(...) goes through a Python-level __new__; the hot path builds the tuple
_INTS = frozenset({int})


MAX_LINE_BYTES = 16 << 20  # a record of 10M tokens holds ~20k block ids (~200 kB); far longer is not a record


def _records(p: Path, block_tokens: int, name: str) -> Iterator[tuple[int, Request]]:
    """(line number, request numbered from 0 in file order) for every non-blank line; ConfigError on bad input.

    The fast path accepts the common well-formed record (integer ms, integer lengths in range, a full list of
    integer ids) without building error context; anything else goes through `parse_line`, which names the field.
    """
    loads, decode_error, ms, cap = orjson.loads, orjson.JSONDecodeError, NS_PER_MS, MAX_TOKENS
    req_id = 0
    with open(p, "rb") as f:
        for lineno, line in enumerate(iter(partial(f.readline, MAX_LINE_BYTES + 1), b""), 1):
            if len(line) > MAX_LINE_BYTES:
                raise ConfigError(
                    f"{p}:{lineno}: line longer than {MAX_LINE_BYTES >> 20} MiB, expected one JSON record"
                )
            try:
                rec = loads(line)
            except decode_error:
                rec = None
            if type(rec) is dict and len(rec) == 4:
                ts, n_in = rec.get("timestamp"), rec.get("input_length")
                n_out, ids = rec.get("output_length"), rec.get("hash_ids")
                if (
                    type(ts) is int
                    and ts >= 0
                    and type(n_in) is int
                    and 1 <= n_in <= cap
                    and type(n_out) is int
                    and 0 <= n_out <= cap
                    and type(ids) is list
                    and len(ids) == -(-n_in // block_tokens)
                    and _INTS.issuperset(map(type, ids))
                ):
                    yield (
                        lineno,
                        _new_request(
                            Request, (req_id, ts * ms, n_in, n_out, tuple(ids), block_tokens, -1, 0, 0, 0, None, name)
                        ),
                    )
                    req_id += 1
                    continue
            if not line.strip():
                continue
            if b"\0" in line:
                raise ConfigError(f"{p}:{lineno}: binary data, expected JSON lines")
            yield lineno, parse_line(line, f"{p}:{lineno}", req_id, block_tokens, name)
            req_id += 1
    if req_id == 0:
        raise ConfigError(f"{p}: empty trace (no records)")


def read_mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS, name: str = "") -> Iterator[Request]:
    """Stream requests in file order. Raises ConfigError naming file, line and field for bad input.

    Timestamps must not decrease; callers that want the documented repair (sorting) use `read_sorted`.
    """
    p = Path(path)
    last_ns = -1
    for lineno, req in _records(p, block_tokens, name):
        if req.arrival_ns < last_ns:
            raise UnsortedTrace(
                f"{p}:{lineno}: field 'timestamp' goes back in time "
                f"({req.arrival_ns // NS_PER_MS} ms after {last_ns // NS_PER_MS} ms)"
            )
        last_ns = req.arrival_ns
        yield req


def read_sorted(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS, name: str = "") -> Iterator[Request]:
    """The documented repair for unsorted timestamps: read everything, stable-sort by time, renumber ids."""
    reqs = [req for _, req in _records(Path(path), block_tokens, name)]
    reqs.sort(key=lambda r: r.arrival_ns)
    for i, r in enumerate(reqs):
        yield r._replace(req_id=i)


_TS = re.compile(rb'"timestamp"\s*:\s*(-?[0-9][0-9.eE+-]*)')


def first_unsorted_line(path: str | Path, chunk_bytes: int = 1 << 24) -> int | None:
    """Line of the first timestamp smaller than the one before, or None: a regex scan in 16 MB chunks, no JSON
    parsing (a line whose timestamp the scan cannot read is left for the reader to report)."""
    last = float("-inf")
    lines_before = 0
    with open(path, "rb") as f:
        tail = b""
        while True:
            block = f.read(chunk_bytes)
            data = tail + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            data, tail = data[:cut], data[cut:]
            try:
                stamps = list(map(float, _TS.findall(data)))
            except ValueError:
                return None
            if any(b < a for a, b in zip([last] + stamps, stamps)):
                return lines_before + _first_drop_line(data, last)
            last = stamps[-1] if stamps else last
            lines_before += data.count(b"\n")
            if not block:
                return None


def _first_drop_line(data: bytes, last: float) -> int:
    for lineno, line in enumerate(data.splitlines(), 1):
        m = _TS.search(line)
        if m is not None:
            ts = float(m.group(1))
            if ts < last:
                return lineno
            last = ts
    return 1


def write_mooncake(requests: Iterable[Request], path: str | Path) -> int:
    """Write requests as Mooncake JSONL (timestamp ms rounded down to an integer); returns the count written.

    Requests without hash ids get an empty list. Sessions and reasoning shares, which the format lacks, go into
    kvbench's extension keys `session_id, turn, think_ms, reason_tokens` (other readers ignore unknown keys).
    """
    n = 0
    with open(path, "wb") as f:
        for r in requests:
            rec = {
                "timestamp": r.arrival_ns // NS_PER_MS,
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
                "hash_ids": list(r.hash_ids),
            }
            if r.session_id >= 0 or r.reason_tokens:
                rec.update(
                    session_id=r.session_id,
                    turn=r.turn,
                    think_ms=r.think_ns // NS_PER_MS,
                    reason_tokens=r.reason_tokens,
                )
            f.write(orjson.dumps(rec))
            f.write(b"\n")
            n += 1
    return n


class UnsortedTrace(ConfigError):
    """Timestamps decrease somewhere; the repair is to sort (stable) and warn."""
