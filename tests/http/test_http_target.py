"""OpenAITarget against a real aiohttp server on 127.0.0.1: faults, bodies, timing order, interrupts, lag, keys."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import duckdb
import pytest
from support.faultserver import CROSS_ORIGIN, FAST, FAULTS, REDIRECTED_PATH, FaultServer, fault_prompt, q, run

from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.target import TargetSpec
from kvbench.workload.stream import Workload

EXPECTED = {  # fault -> (terminal kind, detail prefix; {url}: the server's origin)
    "ok": ("FINISH", "prompt_tokens=21"),
    "reset": ("ERROR", "reset: "),
    "http_429_body": ("REJECT", "http_429: 429 {"),
    "http_429_empty": ("REJECT", "http_429: 429 (no body)"),
    "http_500_body": ("ERROR", "http_5xx: 500 {"),
    "http_503_empty": ("ERROR", "http_5xx: 503 (no body)"),
    "stall": ("ERROR", "stall: "),
    "malformed_sse": ("ERROR", "protocol: SSEError"),
    "invalid_json": ("ERROR", "protocol: JSONDecodeError"),
    "no_done": ("ERROR", "protocol: stream ended without [DONE] after 8 tokens"),
    "short": ("FINISH", "short_output: got 4 of 8 tokens"),
    "huge": ("FINISH", "prompt_tokens=21"),
    "split_crlf": ("FINISH", "prompt_tokens=21"),
    "stall_headers": ("ERROR", "timeout: "),
    "error_obj": ("ERROR", "server_error: "),
    "multiline_huge": ("FINISH", "prompt_tokens=21"),
    "multiline_over": ("ERROR", f"protocol: SSEError: event larger than {6 << 20} bytes"),
    "slow_loris": ("ERROR", "timeout: request took over 2.5 s (request_timeout_s)"),
    "redirect_same": ("FINISH", f"prompt_tokens=21; redirect 1: 307 to {{url}}{REDIRECTED_PATH}"),
    "redirect_cross": ("ERROR", f"redirect: 302 to {CROSS_ORIGIN} (another origin: not followed)"),
    "redirect_loop": ("ERROR", "redirect: 308 to {url}/v1/completions (more than 5 redirects: not followed); "),
    "retry_after_503": (
        "FINISH",
        "prompt_tokens=21; retry 1 after http_5xx: 503 (no body) (Retry-After: 1), waited 1 s",
    ),
    "retry_after_429": (
        "FINISH",
        "prompt_tokens=21; retry 1 after http_429: 429 (no body) (Retry-After: 1), waited 1 s",
    ),
    "retry_after_long": (
        "ERROR",
        "http_5xx: 503 (no body) (Retry-After: 3600), not retried: Retry-After is over read_timeout_s (1 s)",
    ),
    "usage_over": ("FINISH", "usage_mismatch: usage says 8 completion tokens, 4 streamed; prompt_tokens=21"),
    "echo_auth": ("ERROR", 'http_4xx: 401 {"error": {"message": "invalid credentials None"}}'),
}
TOKENS_BEFORE_FAULT = {
    "reset": 4,
    "stall": 2,
    "invalid_json": 1,
    "malformed_sse": 1,
    "error_obj": 1,
    "no_done": 8,
    "short": 4,
    "ok": 8,
    "huge": 8,
    "split_crlf": 8,
    "multiline_huge": 8,
    "multiline_over": 1,
    "redirect_same": 8,
    "retry_after_503": 8,
    "retry_after_429": 8,
    "usage_over": 4,
}  # server sends these before its fault


def test_mixed_faults_each_request_ends_once_with_its_class(tmp_path):
    assert set(EXPECTED) == set(FAULTS)
    # 3 rounds of every fault, 8 tokens asked, arrivals 1 ms apart, all in flight together; each prompt tagged
    # with its request (the server counts a retry's attempts by prompt). One retry allowed, events up to 6 MiB,
    # 2.5 s a request at most. The server runs in its own process, so the 1 s read timeout measures the
    # client and the server, never one waiting for the other's GIL
    reqs = [
        Request(i, i * 1_000_000, 21, 8, prompt=fault_prompt(FAULTS[i % len(FAULTS)], tag=f"r{i}"))
        for i in range(3 * len(FAULTS))
    ]
    limits = {"read_timeout_s": 1.0, "retries": 1, "max_event_bytes": 6 << 20, "request_timeout_s": 2.5}
    with FaultServer(stall_s=3.0) as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", **limits)
        url = srv.base_url.removesuffix("/v1")
    assert stats.status == "complete" and stats.submitted == len(reqs)
    terminals = q(run_dir, "SELECT req_id, kind, detail FROM EV WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL')")
    assert sorted(r[0] for r in terminals) == list(range(len(reqs)))  # exactly one terminal event each
    for rid, kind, detail in terminals:
        want_kind, prefix = EXPECTED[FAULTS[rid % len(FAULTS)]]
        prefix = prefix.replace("{url}", url)
        assert (kind, detail[: len(prefix)]) == (want_kind, prefix), (rid, FAULTS[rid % len(FAULTS)], detail)
    # nothing measured before a fault is lost: the streamed tokens are in the log, before the terminal event
    got = dict(q(run_dir, "SELECT req_id, sum(tokens) FROM EV WHERE kind IN ('FIRST_TOKEN','CHUNK') GROUP BY 1"))
    for rid in range(len(reqs)):
        assert got.get(rid, 0) == TOKENS_BEFORE_FAULT.get(FAULTS[rid % len(FAULTS)], 0), rid
    order = q(
        run_dir,
        """SELECT count(*) FROM EV f JOIN EV t USING (req_id)
                          WHERE f.kind = 'FIRST_TOKEN' AND t.kind IN ('FINISH','ERROR') AND f.t_ns > t.t_ns""",
    )
    assert order == [(0,)]


def test_connection_refused_is_a_connect_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    reqs = [Request(i, i * 1_000_000, 21, 4) for i in range(3)]
    run_dir, stats = run(reqs, f"http://127.0.0.1:{port}/v1", tmp_path / "r")
    assert stats.errors == 3
    assert {d.split(":")[0] for (d,) in q(run_dir, "SELECT detail FROM EV WHERE kind = 'ERROR'")} == {"connect"}


def test_body_carries_exact_length_extras_headers_and_key(tmp_path, monkeypatch):
    monkeypatch.setenv("KVB_TEST_KEY", "sk-secret-123")
    with FaultServer() as srv:
        run_dir, _ = run(
            [Request(0, 0, 40, 5, (7, 8), 32)],
            srv.base_url,
            tmp_path / "r",
            min_tokens=True,
            api_key_env="KVB_TEST_KEY",
            extra_body={"temperature": 0.0},
            headers={"X-Run": "t1"},
        )
        body, headers = srv.requests[0], srv.headers[0]
    assert body["max_tokens"] == 5 and body["min_tokens"] == 5 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.0 and body["model"] == "fault-model"
    assert headers["Authorization"] == "Bearer sk-secret-123" and headers["X-Run"] == "t1"
    # 40 tokens in 32-token blocks at 2 tokens a word: 16 words + 4 words
    assert [len(line.split()) for line in body["prompt"].splitlines()] == [16, 4]
    for path in run_dir.rglob("*"):  # the key is in no output file (run.json names only the env var)
        assert not path.is_file() or b"sk-secret-123" not in path.read_bytes(), path
    assert json.loads((run_dir / "run.json").read_text())["target"]["params"]["api_key_env"] == "KVB_TEST_KEY"


def test_chat_api_counts_delta_content_and_cached_tokens(tmp_path):
    # same two 32-token blocks twice, 60 s apart in the trace but closed loop: the second has block 1..2 cached
    reqs = [Request(0, 0, 64, 3, (1, 2), 32), Request(1, 0, 64, 3, (1, 2), 32)]
    with FaultServer() as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", concurrency=1, api="chat")
        assert "messages" in srv.requests[0] and srv.requests[0]["messages"][0]["role"] == "user"
    assert stats.finished == 2
    rows = q(run_dir, "SELECT req_id, tokens, cached_tokens FROM EV WHERE kind = 'FINISH' ORDER BY 1")
    assert rows == [(0, 3, 0), (1, 3, 64)]  # the fault server caches whole lines: 2 lines * 16 words * 2 tokens


def test_event_order_and_ttft_from_intended_arrival(tmp_path):
    with FaultServer(ttft_s=0.05) as srv:
        run_dir, _ = run([Request(0, 20_000_000, 21, 3)], srv.base_url, tmp_path / "r")
    ev = dict(q(run_dir, "SELECT kind, t_ns FROM EV WHERE kind <> 'CHUNK'"))
    assert ev["ARRIVE"] == 20_000_000  # the intended time, not when the client got to it
    assert ev["ARRIVE"] <= ev["SEND"] and ev["SEND"] + 50_000_000 <= ev["FIRST_TOKEN"] <= ev["LAST_TOKEN"]
    assert ev["LAST_TOKEN"] <= ev["FINISH"]


def test_connect_time_is_reported_on_send(tmp_path):
    # request 0 (t = 0) finds the connection opened before t0; request 1 (t = 0.3 s, past the warm-up span) finds
    # it busy (TTFT 1 s) and opens one (SEND says how long that took); request 2 (t = 2 s) reuses one
    reqs = [Request(0, 0, 21, 2), Request(1, 300_000_000, 21, 2), Request(2, 2_000_000_000, 21, 2)]
    with FaultServer(ttft_s=1.0) as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", read_timeout_s=5.0)
    assert stats.finished == 3
    rows = q(run_dir, "SELECT req_id, detail FROM EV WHERE kind = 'SEND' ORDER BY 1")
    assert [r[0] for r in rows] == [0, 1, 2] and rows[0][1] is None and rows[2][1] is None
    assert rows[1][1].startswith("connect_ns=") and int(rows[1][1].removeprefix("connect_ns=")) > 0


def test_an_interrupt_raised_inside_a_read_stops_the_run(tmp_path):
    # closed loop of 1: after the first request everything happens inside data_received (FINISH, the refill's
    # ARRIVE and SEND), so a Ctrl-C there must stop the run (uvloop reports an exception raised in a protocol
    # callback to the loop's exception handler and carries on); here the progress callback raises it
    def progress(stats) -> None:
        if stats.finished >= 2:
            raise KeyboardInterrupt

    reqs = [Request(i, 0, 21, 2) for i in range(200)]
    spec = TargetSpec("openai", "fault", {"kind": "openai", "base_url": "", **FAST})
    with FaultServer(ttft_s=0.01) as srv:
        spec = TargetSpec("openai", "fault", {**spec.params, "base_url": srv.base_url})
        wl = Workload("t", "mem", "0", lambda: iter(reqs))
        with pytest.raises(KeyboardInterrupt):
            execute(wl, spec, RunOptions(out=tmp_path / "r", concurrency=1), progress)
    run_dir = tmp_path / "r"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    ends = dict(q(run_dir, "SELECT kind, count(*) FROM EV WHERE kind IN ('FINISH', 'CANCEL', 'ERROR') GROUP BY 1"))
    assert ends.get("FINISH", 0) < 200 and ends.get("ERROR", 0) == 0 and sum(ends.values()) <= 200


def test_retries_are_explicit_and_recorded(tmp_path):
    reqs = [
        Request(0, 0, 21, 4, prompt=fault_prompt("http_503_empty")),
        Request(1, 0, 21, 4, prompt=fault_prompt("http_429_empty")),
    ]
    with FaultServer() as srv:
        run_dir, _ = run(reqs, srv.base_url, tmp_path / "r", retries=2)
        sent = len(srv.requests)
    details = dict(q(run_dir, "SELECT req_id, detail FROM EV WHERE kind IN ('ERROR', 'REJECT')"))
    assert sent == 3 + 1  # 503: first try + 2 retries; 429 is a rejection and never retried
    assert details[0] == (
        "http_5xx: 503 (no body); retry 1 after http_5xx: 503 (no body); retry 2 after http_5xx: 503 (no body)"
    )
    assert details[1] == "http_429: 429 (no body)"


def _interrupt_when_received(srv: FaultServer, n: int) -> threading.Thread:
    """SIGINT this process once the server holds n requests: in flight by construction, whatever the load."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while len(srv.requests) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_cancels_every_open_request_once(tmp_path):
    # 4 requests in flight (30 s to first token) and 4 not yet due (t = 60 s); SIGINT once the server has the 4
    reqs = [Request(i, 0 if i < 4 else 60_000_000_000, 21, 3) for i in range(8)]
    with FaultServer(ttft_s=30.0) as srv:
        _interrupt_when_received(srv, 4)
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", read_timeout_s=60)  # in flight until interrupted
    assert stats.status == "interrupted" and stats.cancelled == 8
    rows = q(
        run_dir,
        "SELECT req_id, count(*), min(detail) FROM EV WHERE kind IN ('FINISH','ERROR','CANCEL') GROUP BY 1 ORDER BY 1",
    )
    assert rows == [(i, 1, "interrupted") for i in range(8)]
    # the 4 not yet due never arrived; all 8 are cancelled at the interruption, long before they were due (60 s)
    assert q(run_dir, "SELECT list(req_id ORDER BY req_id) FROM EV WHERE kind = 'ARRIVE'") == [([0, 1, 2, 3],)]
    first, last = q(run_dir, "SELECT min(t_ns), max(t_ns) FROM EV WHERE kind = 'CANCEL'")[0]
    sent = q(run_dir, "SELECT max(t_ns) FROM EV WHERE kind = 'SEND'")[0][0]
    assert sent < first and last - first < 1_000_000_000 and last < 30_000_000_000


def test_client_lag_is_checked_and_recorded(tmp_path, capfd):
    with FaultServer() as srv:
        run_dir, _ = run([Request(0, 0, 21, 2)], srv.base_url, tmp_path / "r", lag_warn_ms=0.0)
    lag = json.loads((run_dir / "run.json").read_text())["client_lag"]
    assert lag["requests"] == 1 and lag["behind"] is True and lag["threshold_ms"] == 0.0
    assert "client fell behind" in capfd.readouterr().err


def test_server_metrics_are_scraped_into_their_table(tmp_path):
    with FaultServer(ttft_s=0.25) as srv:
        run_dir, _ = run([Request(0, 0, 21, 2)], srv.base_url, tmp_path / "r", scrape_interval_s=0.1)
    rows = (
        duckdb.connect()
        .execute(f"SELECT DISTINCT name, labels FROM read_parquet('{run_dir}/server_metrics/*.parquet') ORDER BY 1")
        .fetchall()
    )
    # process_cpu_seconds_total is not in a kept family; scrapes at 0, 0.1, 0.2 s and one on the way out
    assert rows == [("llamacpp:requests_processing", ""), ("vllm:num_requests_running", 'model_name="fault-model"')]


@pytest.mark.parametrize("n_requests", [40])
def test_many_concurrent_requests_over_one_session(tmp_path, n_requests):
    # closed loop at 8 in flight, 40 requests of 6 tokens: all finish with their exact output length
    reqs = [Request(i, 0, 21, 6) for i in range(n_requests)]
    with FaultServer() as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", concurrency=8)
    assert stats.finished == n_requests
    assert q(run_dir, "SELECT count(*), sum(tokens) FROM EV WHERE kind = 'FINISH' AND detail = 'prompt_tokens=21'") == [
        (n_requests, 6 * n_requests)
    ]


def test_a_request_that_cannot_be_built_ends_in_error_and_the_rest_run(tmp_path):
    # open loop, 5 ms apart, so each payload is built ahead of its release; request 1's prompt holds a lone
    # surrogate, which JSON cannot encode: it ends ERROR "internal", the 2 others FINISH with 8 tokens each
    reqs = [Request(i, i * 5_000_000, 21, 8, prompt="\ud800" if i == 1 else fault_prompt("ok")) for i in range(3)]
    with FaultServer() as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r")
    rows = q(run_dir, "SELECT req_id, kind, tokens, detail FROM EV WHERE kind IN ('FINISH', 'ERROR') ORDER BY req_id")
    assert [(r[0], r[1]) for r in rows] == [(0, "FINISH"), (1, "ERROR"), (2, "FINISH")]
    assert rows[0][2] == rows[2][2] == 8
    assert rows[1][3] == "internal: TypeError: str is not valid UTF-8: surrogates not allowed"


def test_faults_on_a_reused_keep_alive_connection_end_like_on_a_new_one(tmp_path):
    # closed loop of 1: each fault follows an "ok" request whose connection stayed open, so the fault request is
    # written on that reused connection (the task-less path) and must end exactly as EXPECTED says, with the
    # tokens streamed before its fault; a stall or a silent server is ended by the watchdog (read timeout 0.3 s)
    faults = ["stall", "stall_headers", "reset", "no_done", "http_500_body", "http_429_empty", "short", "error_obj"]
    names = [n for f in faults for n in ("ok", f)]
    reqs = [Request(i, 0, 21, 8, prompt=fault_prompt(name)) for i, name in enumerate(names)]
    with FaultServer(stall_s=3.0) as srv:
        run_dir, stats = run(reqs, srv.base_url, tmp_path / "r", concurrency=1)
        ports = srv.client_ports
    assert stats.status == "complete" and stats.submitted == len(reqs)
    assert all(ports[i] == ports[i - 1] for i in range(1, len(names), 2))  # every fault reused the ok's connection
    terminals = q(run_dir, "SELECT req_id, kind, detail FROM EV WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL')")
    assert sorted(r[0] for r in terminals) == list(range(len(reqs)))
    got = dict(q(run_dir, "SELECT req_id, sum(tokens) FROM EV WHERE kind IN ('FIRST_TOKEN','CHUNK') GROUP BY 1"))
    for rid, kind, detail in terminals:
        want_kind, prefix = EXPECTED[names[rid]]
        assert (kind, detail[: len(prefix)]) == (want_kind, prefix), (rid, names[rid], detail)
        assert got.get(rid, 0) == TOKENS_BEFORE_FAULT.get(names[rid], 0), (rid, names[rid])
