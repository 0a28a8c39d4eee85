"""The only place that converts units: times are int nanoseconds (`*_ns`), sizes are explicit (`*_bytes`, `*_tokens`)."""

from __future__ import annotations

import math
import re

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
BYTES_PER_GB = 1_000_000_000

MOONCAKE_BLOCK_TOKENS = 512  # FAST'25 release: one hash id names a 512-token block and everything before it

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BYTE_SUFFIX = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def ms_to_ns(ms: float) -> int:
    return int(round(ms * NS_PER_MS))


def s_to_ns(s: float) -> int:
    return int(round(s * NS_PER_S))


def us_to_ns(us: float) -> int:
    return int(round(us * NS_PER_US))


def ns_to_ms(ns: int | float) -> float:
    return ns / NS_PER_MS


def ns_to_s(ns: int | float) -> float:
    return ns / NS_PER_S


def ns_to_us(ns: int | float) -> float:
    return ns / NS_PER_US


def ns_at_rate(amount: float, per_s: float) -> float:
    """Nanoseconds to move or compute `amount` (bytes, FLOPs, fixed-point units) at `per_s` of it per second."""
    return amount * NS_PER_S / per_s


def amount_at_rate(ns: float, per_s: float) -> float:
    """How much moves in `ns` nanoseconds at `per_s` per second (the inverse of ns_at_rate)."""
    return ns * per_s / NS_PER_S


def bytes_to_gb(nbytes: int | float) -> float:
    """Decimal gigabytes, for messages."""
    return nbytes / BYTES_PER_GB


def blocks_for(tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> int:
    """Number of blocks that hold `tokens` (the last one may be partial)."""
    return -(-tokens // block_tokens)


MAX_PARSED = 1e18  # counts and sizes above an exabyte are typos, and would overflow int64 columns


def parse_count(text: str) -> int:
    """'3M' -> 3_000_000, '10k' -> 10_000, '1.5e6' -> 1_500_000 (decimal suffixes, as token capacities are quoted)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)\s*", text.lower())
    if not m:
        raise ValueError(f"expected a count like 3M, 10k or 1500000, got {text!r}")
    return _bounded_int(float(m.group(1)) * _SUFFIX[m.group(2)], text)


def parse_bytes(text: str) -> int:
    """'20MB' -> 20_000_000, '1GiB' -> 2**30 (decimal and binary suffixes)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?b|b)?\s*", text.lower())
    if not m:
        raise ValueError(f"expected a size like 20MB, 1.5GiB or 4096, got {text!r}")
    return _bounded_int(float(m.group(1)) * _BYTE_SUFFIX[m.group(2) or ""], text)


def _bounded_int(value: float, text: str) -> int:
    if not value <= MAX_PARSED:
        raise ValueError(f"{text!r} is too large (at most {MAX_PARSED:.0e})")
    return int(round(value))


def fmt_ns(ns: int | float) -> str:
    """Human-readable duration for terminal output."""
    if not math.isfinite(ns):
        return str(ns)
    a = abs(ns)
    if a >= NS_PER_S:
        return f"{ns / NS_PER_S:.3f} s"
    if a >= NS_PER_MS:
        return f"{ns / NS_PER_MS:.2f} ms"
    if a >= NS_PER_US:
        return f"{ns / NS_PER_US:.1f} µs"
    return f"{int(ns)} ns"
