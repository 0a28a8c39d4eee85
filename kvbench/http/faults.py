"""Failure classes of a streamed request: each exception or status becomes one `<class>: <message>` detail."""

from __future__ import annotations

import asyncio

import orjson

from kvbench.http.sse import SSEError

# connect: no TCP connection · http_4xx / http_5xx: error status (429 is a REJECT, not an ERROR) · redirect: a
# 3xx not followed (another origin, too many hops, or not a 301/302/307/308) · timeout: no response within
# read_timeout_s of the send, or the request's total bound exceeded · stall: silence mid-stream longer than
# read_timeout_s · reset: connection closed or broken mid-request · protocol: malformed SSE, invalid JSON, an
# event over max_event_bytes, a stream that ends without [DONE] or finish_reason · server_error: an `error`
# object inside the stream · internal: an unexpected client exception (a kvbench bug; reported, never crashing
# the run) · short_output and usage_mismatch are FINISH details, not errors.
RETRYABLE = frozenset({"connect", "http_5xx", "reset", "timeout"})
RETRY_AFTER_STATUSES = (429, 503)  # whose Retry-After header a retry honours


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


def classify_status(status: int, body: bytes, headers: dict[bytes, bytes] | None = None) -> tuple[str, str]:
    """(class, message) of a non-200 response; the caller turns http_429 into a REJECT. A redirect names its
    Location, a 429/503 its Retry-After."""
    headers = headers or {}
    if 300 <= status < 400:
        location = headers.get(b"location")
        return "redirect", f"{status} to {one_line(location.decode('latin-1')) if location else '(no Location)'}"
    text = one_line(body.decode("utf-8", "replace")) if body else "(no body)"
    after = headers.get(b"retry-after") if status in RETRY_AFTER_STATUSES else None
    if after:
        text += f" (Retry-After: {one_line(after.decode('latin-1'), 60)})"
    if status == 429:
        return "http_429", f"429 {text}"
    return ("http_4xx" if status < 500 else "http_5xx"), f"{status} {text}"
