"""OpenAITarget against hostile or slow servers: phases timed from their own start, a blocked client loop, slow
loris, redirects, Retry-After and usage that over-claims, each against the real fault server."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
from support.faultserver import CROSS_ORIGIN, REDIRECTED_PATH, RETRY_AFTER_S, FaultServer, fault_prompt, q, run

from kvbench.records import Request
from kvbench.run import START_MARGIN_NS

TERMINAL = "SELECT req_id, kind, detail FROM EV WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL') ORDER BY req_id"


def test_a_request_waiting_for_a_pooled_connection_is_not_a_server_timeout(tmp_path):
    # one connection at most; request 0 streams 8 tokens 0.1 s apart (0.8 s), request 1 waits for that
    # connection all along, longer than the 0.3 s read timeout: it was never sent, so the server cannot have
    # kept it waiting. Both FINISH, and request 1 is sent after request 0 ended
    reqs = [Request(i, 0, 21, 8) for i in range(2)]
    with FaultServer(itl_s=0.1) as srv:
        run_dir, _ = run(reqs, srv.base_url, tmp_path / "r", max_connections=1)
    assert [r[:2] for r in q(run_dir, TERMINAL)] == [(0, "FINISH"), (1, "FINISH")]
    ev = dict(((rid, kind), t) for rid, kind, t in q(run_dir, "SELECT req_id, kind, t_ns FROM EV"))
    assert ev[(1, "SEND")] >= ev[(0, "FINISH")] >= 700_000_000


def test_connecting_is_bounded_by_connect_timeout_not_read_timeout(tmp_path):
    # a listener whose accept queue (backlog 0: one connection) is full answers no SYN: the client's connect
    # hangs. Read timeout 0.3 s, connect timeout 1 s: the request ends `connect` after 1 s, not `timeout`
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))
        run_dir, _ = run([Request(0, 0, 21, 4)], f"http://127.0.0.1:{port}/v1", tmp_path / "r", connect_timeout_s=1.0)
    [(_, kind, detail)] = q(run_dir, TERMINAL)
    assert (kind, detail) == ("ERROR", f"connect: 127.0.0.1:{port}: no connection within 1 s")
    # the pool warms this request's connection before t0 (at most START_MARGIN_NS before it), so the 1 s connect
    # timeout can end a little before t0 + 1 s; still far past the 0.3 s read timeout
    [(t_ns,)] = q(run_dir, "SELECT t_ns FROM EV WHERE kind = 'ERROR'")
    assert t_ns >= 1_000_000_000 - START_MARGIN_NS
    assert q(run_dir, "SELECT count(*) FROM EV WHERE kind = 'SEND'") == [(0,)]


def test_a_blocked_client_loop_is_not_blamed_on_the_server(tmp_path):
    # 20 tokens 50 ms apart (~1 s), read timeout 0.3 s. 0.25 s into the run the client's own thread stops for
    # 0.6 s (a signal handler that sleeps, as a long GC pause or a slow callback would) while the server keeps
    # streaming into the socket: what arrived meanwhile is read when the loop runs again, so the request
    # FINISHes with all 20 tokens instead of a stall
    previous = signal.signal(signal.SIGALRM, lambda *_: time.sleep(0.6))
    try:
        with FaultServer(itl_s=0.05) as srv:
            run([Request(0, 0, 21, 1)], srv.base_url, tmp_path / "warm")  # imports done: the run starts at once
            signal.setitimer(signal.ITIMER_REAL, 0.25)
            run_dir, _ = run([Request(0, 0, 21, 20)], srv.base_url, tmp_path / "r")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert q(run_dir, TERMINAL) == [(0, "FINISH", "prompt_tokens=21")]
    assert q(run_dir, "SELECT sum(tokens) FROM EV WHERE kind IN ('FIRST_TOKEN', 'CHUNK')") == [(20,)]


def test_slow_loris_ends_at_the_default_bound_from_the_output_length(tmp_path):
    # a keep-alive comment every 50 ms, never a token: never silent for the 1 s read timeout (20 comments in it,
    # however loaded the machine). No request_timeout_s: 2 tokens asked bound the request to 2 x 1 + 2 x min(1, 1)
    # = 4 s after its SEND. (Unbounded, it would never end: a SIGINT at 60 s then fails the test instead of hanging.)
    guard = threading.Timer(60.0, os.kill, (os.getpid(), signal.SIGINT))
    with FaultServer() as srv:
        guard.start()
        try:
            run_dir, stats = run(
                [Request(0, 0, 21, 2, prompt=fault_prompt("slow_loris"))],
                srv.base_url,
                tmp_path / "r",
                read_timeout_s=1.0,
            )
        finally:
            guard.cancel()
    assert stats.status == "complete"
    [(_, kind, detail)] = q(run_dir, TERMINAL)
    assert (kind, detail) == (
        "ERROR",
        "timeout: request took over 4 s (2 x read_timeout_s + 2 tokens x 1 s; no request_timeout_s)",
    )
    [(took,)] = q(run_dir, "SELECT max(t_ns) FILTER (kind = 'ERROR') - max(t_ns) FILTER (kind = 'SEND') FROM EV")
    assert 4_000_000_000 <= took < 8_000_000_000  # the watchdog looks every 1 / 8 s; slack for a loaded machine


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_same_origin_redirect_is_followed_with_the_same_post(tmp_path, status):
    with FaultServer(redirect_status=status) as srv:
        run_dir, _ = run([Request(0, 0, 21, 4, prompt=fault_prompt("redirect_same"))], srv.base_url, tmp_path / "r")
        paths, bodies, url = srv.paths, srv.requests, srv.base_url.removesuffix("/v1")
    assert paths == ["/v1/completions", REDIRECTED_PATH] and bodies[0] == bodies[1]
    assert q(run_dir, TERMINAL) == [(0, "FINISH", f"prompt_tokens=21; redirect 1: {status} to {url}{REDIRECTED_PATH}")]


def test_a_redirect_to_another_origin_or_in_a_loop_is_reported_not_followed(tmp_path):
    reqs = [Request(i, 0, 21, 4, prompt=fault_prompt(f)) for i, f in enumerate(["redirect_cross", "redirect_loop"])]
    with FaultServer() as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", concurrency=1)
        paths, url = srv.paths, srv.base_url.removesuffix("/v1")
    assert stats.errors == 2 and paths == ["/v1/completions"] * 7  # 1 cross-origin; the loop's 1 + 5 hops
    (_, k0, d0), (_, k1, d1) = q(run_dir, TERMINAL)
    assert (k0, d0) == ("ERROR", f"redirect: 302 to {CROSS_ORIGIN} (another origin: not followed)")
    hops = "; ".join(f"redirect {i}: 308 to {url}/v1/completions" for i in range(1, 6))
    assert (k1, d1) == ("ERROR", f"redirect: 308 to {url}/v1/completions (more than 5 redirects: not followed); {hops}")


def test_retry_after_is_waited_for_and_recorded(tmp_path):
    # first attempt: 503 / 429 with Retry-After: 1; the retry is sent 1 s later and streams 4 tokens. Without
    # retries the 503 ends the request and its detail still says what the server asked
    faults = ["retry_after_503", "retry_after_429", "retry_after_long"]
    reqs = [Request(i, 0, 21, 4, prompt=fault_prompt(f)) for i, f in enumerate(faults)]
    with FaultServer() as srv:
        run_dir, _ = run(reqs, srv.base_url, tmp_path / "r", retries=2, read_timeout_s=2.0)
        tries = [b["prompt"] for b in srv.requests]
        norty = run(
            [Request(0, 0, 21, 4, prompt=fault_prompt("retry_after_503", tag="x"))], srv.base_url, tmp_path / "n"
        )
    assert [tries.count(fault_prompt(f)) for f in faults] == [2, 2, 1]
    rows = q(run_dir, TERMINAL)
    assert rows[0] == (
        0,
        "FINISH",
        "prompt_tokens=21; retry 1 after http_5xx: 503 (no body) (Retry-After: 1), waited 1 s",
    )
    assert rows[1] == (
        1,
        "FINISH",
        "prompt_tokens=21; retry 1 after http_429: 429 (no body) (Retry-After: 1), waited 1 s",
    )
    assert rows[2] == (
        2,
        "ERROR",
        "http_5xx: 503 (no body) (Retry-After: 3600), not retried: Retry-After is over read_timeout_s (2 s)",
    )
    waits = q(
        run_dir,
        "SELECT max(t_ns) FILTER (kind = 'FIRST_TOKEN') - max(t_ns) FILTER (kind = 'SEND') FROM EV WHERE req_id < 2 GROUP BY req_id",
    )
    assert all(w >= RETRY_AFTER_S * 1_000_000_000 for (w,) in waits)
    assert q(norty[0], TERMINAL) == [(0, "ERROR", "http_5xx: 503 (no body) (Retry-After: 1)")]


def test_usage_that_claims_more_tokens_than_streamed_is_flagged(tmp_path):
    # 4 chunks with text streamed, usage says all 8 asked: FINISH keeps the usage's count and says so
    with FaultServer() as srv:
        run_dir, _ = run([Request(0, 0, 21, 8, prompt=fault_prompt("usage_over"))], srv.base_url, tmp_path / "r")
    assert q(
        run_dir, "SELECT kind, tokens, detail FROM EV WHERE kind IN ('LAST_TOKEN', 'FINISH') ORDER BY kind DESC"
    ) == [
        ("LAST_TOKEN", 4, None),
        ("FINISH", 8, "usage_mismatch: usage says 8 completion tokens, 4 streamed; prompt_tokens=21"),
    ]
