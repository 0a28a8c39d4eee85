"""Failure classes of a streamed request: each exception or status becomes one `<class>: <message>` detail."""

from __future__ import annotations

import asyncio

import orjson

from kvbench.http.sse import SSEError

# connect: no TCP connection · http_4xx / http_5xx: error status (429 is a REJECT, not an ERROR) · timeout: no
# response within read_timeout_s, or request_timeout_s exceeded · stall: silence mid-stream longer than
# read_timeout_s · reset: connection closed or broken mid-request · protocol: malformed SSE, invalid JSON, a
# stream that ends without [DONE] or finish_reason · server_error: an `error` object inside the stream ·
# internal: an unexpected client exception (a kvbench bug; reported, never crashing the run) · short_output is a
# FINISH detail, not an error: fewer tokens than asked.
RETRYABLE = frozenset({"connect", "http_5xx", "reset", "timeout"})


class StreamFault(Exception):
    """A fault found while reading a stream, already classified."""

    def __init__(self, cls: str, message: str):
        super().__init__(message)
        self.cls = cls


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def classify(exc: BaseException) -> tuple[str, str]:
    """(class, message) of an exception raised by one attempt."""
    if isinstance(exc, StreamFault):
        return exc.cls, str(exc)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # silences are the watchdog's; this is the total
        return "timeout", f"request took longer than request_timeout_s ({type(exc).__name__})"
    if isinstance(exc, (SSEError, orjson.JSONDecodeError, UnicodeDecodeError)):
        return "protocol", one_line(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OSError):  # ConnectionResetError, BrokenPipeError, ... while writing or reading
        return "reset", one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return "internal", one_line(f"{type(exc).__name__}: {exc}")


def classify_status(status: int, body: bytes) -> tuple[str, str]:
    """(class, message) of a non-200 response; the caller turns http_429 into a REJECT."""
    text = one_line(body.decode("utf-8", "replace")) if body else "(no body)"
    if status == 429:
        return "http_429", f"429 {text}"
    return ("http_4xx" if status < 500 else "http_5xx"), f"{status} {text}"
