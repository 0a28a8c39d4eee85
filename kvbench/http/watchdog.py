"""Read-watchdog rules: each phase of an attempt timed from its own start, and a finite bound on a whole one.

Phases: connecting is bounded by connect_timeout_s (conn.Pool, class `connect`) and waiting for a pooled
connection is the client's own queue, so neither is the server's: an attempt is judged only once its request
was written (SEND). From then, the wait for the first response bytes (`timeout`) and every silence between
bytes (`stall`) are bounded by read_timeout_s, and the whole attempt by its total bound (`timeout`).
"""

from __future__ import annotations

from kvbench.http.profile import EndpointProfile
from kvbench.http.stream import Response
from kvbench.units import s_to_ns

PER_TOKEN_S = 1.0  # the default bound's allowance per output token, when read_timeout_s is larger


def request_bound_s(prof: EndpointProfile, output_tokens: int) -> float:
    """Seconds an attempt may take from its SEND: request_timeout_s, or when that is 0, a default derived from
    the expected output length that no working server reaches and a slow-loris server (bytes just often
    enough never to be silent) cannot stretch: 2 x read_timeout_s (headers, then the first token) + output
    tokens x min(read_timeout_s, 1 s)."""
    if prof.request_timeout_s:
        return prof.request_timeout_s
    return 2 * prof.read_timeout_s + max(1, output_tokens) * min(prof.read_timeout_s, PER_TOKEN_S)


def overdue(resp: Response, now: int, grace: int, prof: EndpointProfile, output_tokens: int) -> bool:
    """Sets resp.timed_out (class, message) when the attempt, sent, is silent or old past its limits. `grace`:
    how late the watchdog itself woke (a blocked client loop); bytes that arrived meanwhile may not have been
    read yet, so that long is not held against the server."""
    if resp.timed_out is not None or resp.ended or resp.start_ns < 0:
        return False
    if now - resp.io_ns - grace > s_to_ns(prof.read_timeout_s):
        what = "no bytes mid-stream" if resp.headers else "no response"
        resp.timed_out = (
            "stall" if resp.headers else "timeout",
            f"{what} for {prof.read_timeout_s:g} s (read_timeout_s)",
        )
    elif now - resp.start_ns - grace > s_to_ns(request_bound_s(prof, output_tokens)):
        resp.timed_out = ("timeout", f"request took over {_bound_text(prof, output_tokens)}")
    return resp.timed_out is not None


def _bound_text(prof: EndpointProfile, output_tokens: int) -> str:
    bound = request_bound_s(prof, output_tokens)
    if prof.request_timeout_s:
        return f"{bound:g} s (request_timeout_s)"
    per = min(prof.read_timeout_s, PER_TOKEN_S)
    return f"{bound:g} s (2 x read_timeout_s + {max(1, output_tokens)} tokens x {per:g} s; no request_timeout_s)"
