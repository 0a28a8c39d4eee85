"""What follows a failed attempt (retry, Retry-After, redirect) and the watchdog's rules, computed by hand."""

from __future__ import annotations

import pytest

from kvbench.http.followup import Tried, next_step, redirect_target, repath, retry_after_s
from kvbench.http.profile import EndpointProfile
from kvbench.http.stream import Response
from kvbench.http.watchdog import overdue, request_bound_s

URL = "http://10.0.0.1:8000/v1/completions"
PAYLOAD = b"POST /v1/completions HTTP/1.1\r\nHost: 10.0.0.1:8000\r\nContent-Length: 2\r\n\r\n{}"
FRESH = Tried(retries=0, max_retries=2, hops=0, wait_limit_s=5.0)


@pytest.mark.parametrize(
    "value, seconds",
    [
        (b"7", 7.0),
        (b" 120 ", 120.0),
        (b"Thu, 01 Jan 1970 00:01:40 GMT", 40.0),  # 100 s after the epoch, asked at 60 s
        (b"Thu, 01 Jan 1970 00:00:10 GMT", 0.0),  # already past
        (b"soon", None),
        (b"-5", None),
        (b"", None),
    ],
)
def test_retry_after_as_seconds_or_an_http_date(value, seconds):
    assert retry_after_s({b"retry-after": value}, now_s=60.0) == seconds


@pytest.mark.parametrize(
    "location, target, why",
    [
        (b"/v2/completions", "http://10.0.0.1:8000/v2/completions", ""),
        (b"completions2?x=1", "http://10.0.0.1:8000/v1/completions2?x=1", ""),
        (b"http://10.0.0.1:8000/v1/c", "http://10.0.0.1:8000/v1/c", ""),
        (b"http://10.0.0.1:8001/v1/c", None, "another origin: not followed"),
        (b"https://10.0.0.1:8000/v1/c", None, "another origin: not followed"),
        (b"http://10.0.0.2:8000/v1/c", None, "another origin: not followed"),
        (b"http://10.0.0.1:80x/v1/c", None, "unreadable Location: not followed"),
        (b"/v1/a b", None, "unreadable Location: not followed"),
        (None, None, "no Location: not followed"),
    ],
)
def test_a_redirect_is_followed_only_to_the_same_origin(location, target, why):
    assert redirect_target(307, location, URL) == (target, why)


def test_303_and_other_3xx_are_not_followed():
    assert redirect_target(303, b"/v1/x", URL) == (None, "303 is not followed")


def test_a_followed_redirect_rewrites_only_the_request_line():
    assert repath(PAYLOAD, "http://10.0.0.1:8000/v2/c?a=1") == PAYLOAD.replace(b"/v1/completions", b"/v2/c?a=1", 1)
    step, fault = next_step(("redirect", "308 to /v2/c"), 308, {b"location": b"/v2/c"}, URL, PAYLOAD, FRESH)
    assert step is not None and (step.url, step.wait_s, step.hop) == ("http://10.0.0.1:8000/v2/c", 0.0, True)
    assert step.note == "redirect 1: 308 to http://10.0.0.1:8000/v2/c" and fault == ("redirect", "308 to /v2/c")
    at_limit = FRESH._replace(hops=5)
    assert next_step(fault, 308, {b"location": b"/v2/c"}, URL, PAYLOAD, at_limit) == (
        None,
        ("redirect", "308 to /v2/c (more than 5 redirects: not followed)"),
    )


def test_retries_follow_the_class_the_count_and_retry_after():
    reset = ("reset", "connection closed")
    step, _ = next_step(reset, 200, {}, URL, PAYLOAD, FRESH)
    assert step == (URL, PAYLOAD, 0.0, "retry 1 after reset: connection closed", False)
    assert next_step(reset, 200, {}, URL, PAYLOAD, FRESH._replace(retries=2)) == (None, reset)
    assert next_step(("http_4xx", "404 x"), 404, {}, URL, PAYLOAD, FRESH) == (None, ("http_4xx", "404 x"))
    rejected = ("http_429", "429 (no body)")
    assert next_step(rejected, 429, {}, URL, PAYLOAD, FRESH) == (None, rejected)  # a 429 without Retry-After
    step, _ = next_step(rejected, 429, {b"retry-after": b"3"}, URL, PAYLOAD, FRESH)
    assert step is not None and (step.wait_s, step.note) == (3.0, "retry 1 after http_429: 429 (no body), waited 3 s")
    busy = ("http_5xx", "503 (no body) (Retry-After: 9)")
    assert next_step(busy, 503, {b"retry-after": b"9"}, URL, PAYLOAD, FRESH) == (
        None,
        ("http_5xx", "503 (no body) (Retry-After: 9), not retried: Retry-After is over read_timeout_s (5 s)"),
    )
    odd = ("http_5xx", "503 (no body) (Retry-After: soon)")
    assert next_step(odd, 503, {b"retry-after": b"soon"}, URL, PAYLOAD, FRESH) == (
        None,
        ("http_5xx", "503 (no body) (Retry-After: soon), not retried: unreadable Retry-After"),
    )


def test_the_default_bound_grows_with_the_output_length():
    # 2 x read_timeout_s + tokens x min(read_timeout_s, 1 s)
    assert request_bound_s(EndpointProfile(), 100) == 2 * 60 + 100 * 1.0
    assert request_bound_s(EndpointProfile(read_timeout_s=0.25), 8) == 0.5 + 8 * 0.25
    assert request_bound_s(EndpointProfile(read_timeout_s=0.25), 0) == 0.5 + 1 * 0.25  # max_tokens is at least 1
    assert request_bound_s(EndpointProfile(request_timeout_s=30.0), 100) == 30.0


def response(start_ns: int, io_ns: int, headers: bool) -> Response:
    r = Response([].append, 1, 0, False, 1 << 20, io_ns, send_event=False)
    if start_ns >= 0:
        r.on_send(start_ns)
    r.io_ns, r.headers = io_ns, headers
    return r


S = 1_000_000_000
PROF = EndpointProfile(read_timeout_s=1.0)  # bound for 8 tokens: 2 + 8 x 1 = 10 s


@pytest.mark.parametrize(
    "start_ns, io_ns, headers, now, grace, verdict",
    [
        (-1, 0, False, 50 * S, 0, None),  # never sent (connecting, or waiting for a connection): never the server's
        (0, 0, False, S, 0, None),  # exactly the read timeout: not over it
        (0, 0, False, S + 1, 0, ("timeout", "no response for 1 s (read_timeout_s)")),
        (0, S, True, 2 * S + 1, 0, ("stall", "no bytes mid-stream for 1 s (read_timeout_s)")),
        (0, S, True, 2 * S + 1, 1, None),  # the watchdog woke 1 ns late: that much is not the server's
        (0, S, True, 2 * S + 600_000_000, 700_000_000, None),  # a loop blocked 0.7 s
        (
            0,
            10 * S,
            True,
            10 * S + 1,
            0,
            ("timeout", "request took over 10 s (2 x read_timeout_s + 8 tokens x 1 s; no request_timeout_s)"),
        ),
    ],
)
def test_each_phase_is_timed_from_its_own_start(start_ns, io_ns, headers, now, grace, verdict):
    r = response(start_ns, io_ns, headers)
    assert overdue(r, now, grace, PROF, 8) is (verdict is not None)
    assert r.timed_out == verdict
