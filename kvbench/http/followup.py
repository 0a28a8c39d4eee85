"""What follows a failed attempt: a retry (after the server's Retry-After), a same-origin redirect, or the end."""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from kvbench.http.faults import RETRY_AFTER_STATUSES, RETRYABLE

MAX_REDIRECTS = 5  # hops one request follows; a longer chain (or a loop) ends it as `redirect`
FOLLOWED = frozenset({301, 302, 307, 308})  # re-sent as the same POST: an API client keeps method and body


class Step(NamedTuple):
    """The next attempt: its URL and payload, the wait before it, and the note the terminal detail gets."""

    url: str
    payload: bytes
    wait_s: float
    note: str
    hop: bool  # a redirect (else a retry)


class Tried(NamedTuple):
    """What one request has used up so far, and its limits."""

    retries: int  # retries made
    max_retries: int  # the profile's `retries`
    hops: int  # redirects followed
    wait_limit_s: float  # the longest Retry-After honoured (read_timeout_s)


def next_step(
    fault: tuple[str, str], status: int, headers: dict[bytes, bytes], url: str, payload: bytes, tried: Tried
) -> tuple[Step | None, tuple[str, str]]:
    """(the next attempt or None, the fault as it is reported if the request ends here). A redirect does not
    use a retry up; a retry of a 429/503 waits for its Retry-After, when that is at most `wait_limit_s`."""
    cls, message = fault
    if cls == "redirect":
        target, why = redirect_target(status, headers.get(b"location"), url)
        if target is not None and tried.hops >= MAX_REDIRECTS:
            target, why = None, f"more than {MAX_REDIRECTS} redirects: not followed"
        if target is None:
            return None, (cls, f"{message} ({why})")
        return Step(
            target, repath(payload, target), 0.0, f"redirect {tried.hops + 1}: {status} to {target}", True
        ), fault
    if tried.retries >= tried.max_retries or not (cls in RETRYABLE or (status == 429 and b"retry-after" in headers)):
        return None, fault
    wait, why = retry_wait(status, headers, tried.wait_limit_s)
    if why:
        return None, (cls, f"{message}, not retried: {why}")
    later = f", waited {wait:g} s" if wait else ""
    return Step(url, payload, wait, f"retry {tried.retries + 1} after {cls}: {message}{later}", False), fault


def retry_wait(status: int, headers: dict[bytes, bytes], limit_s: float) -> tuple[float, str]:
    """(seconds to wait before retrying, "" or why not to retry): a 429/503's Retry-After when it is at most
    `limit_s`; a longer or unreadable one is not waited for, and the request ends."""
    if status not in RETRY_AFTER_STATUSES or b"retry-after" not in headers:
        return 0.0, ""
    wait = retry_after_s(headers, time.time())
    if wait is None:
        return 0.0, "unreadable Retry-After"
    if wait > limit_s:
        return 0.0, f"Retry-After is over read_timeout_s ({limit_s:g} s)"
    return wait, ""


def retry_after_s(headers: dict[bytes, bytes], now_s: float) -> float | None:
    """Seconds a Retry-After header asks to wait (delay-seconds, or an HTTP-date against `now_s` Unix time);
    None when absent or unreadable."""
    value = headers.get(b"retry-after", b"").decode("latin-1").strip()
    if value.isdigit():
        return float(int(value[:12]))  # at most 12 digits: an hour or a century, never a huge integer
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now_s)


def redirect_target(status: int, location: bytes | None, url: str) -> tuple[str | None, str]:
    """(the absolute URL to follow, or None and why not): a 301/302/307/308 to the same origin (scheme, host,
    port) as `url`; a request is never sent, with its key, to another origin."""
    if status not in FOLLOWED:
        return None, f"{status} is not followed"
    if not location:
        return None, "no Location: not followed"
    target = urljoin(url, location.decode("latin-1").strip())
    try:
        a, b = urlsplit(url), urlsplit(target)
        same = (a.scheme, a.hostname, _port(a.scheme, a.port)) == (b.scheme, b.hostname, _port(b.scheme, b.port))
    except ValueError:  # a port that is not a number
        return None, "unreadable Location: not followed"
    if not same:
        return None, "another origin: not followed"
    if any(not 32 < ord(c) < 127 for c in target):
        return None, "unreadable Location: not followed"
    return target, ""


def repath(payload: bytes, url: str) -> bytes:
    """`payload` (a whole POST request) with its request line pointing at `url`'s path and query."""
    u = urlsplit(url)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return b"POST %s HTTP/1.1%s" % (path.encode("ascii"), payload[payload.index(b"\r\n") :])


def _port(scheme: str, port: int | None) -> int:
    return port if port is not None else 443 if scheme == "https" else 80
