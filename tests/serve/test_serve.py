"""`kvbench serve` over real HTTP: a subprocess on 127.0.0.1, driven with an aiohttp client."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import aiohttp
import orjson
import pytest
from support.serve_proc import start_serve

from kvbench.devservers.llamacpp import stop

SLACK_NS = 2_000_000  # asyncio timers may fire up to ~1 ms early (clock resolution); allow 2 ms


@pytest.fixture(scope="module")
def fixed_server():
    """ttft 60 ms, itl 15 ms, eos after 4 tokens unless ignore_eos, prefix blocks of 4 words."""
    proc, url = start_serve("--target", "fixed:ttft_ms=60,itl_ms=15,eos_tokens=4", "--block-tokens", "4")
    try:
        yield url
    finally:
        stop(proc)


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The server's /metrics samples as {name: value} (its metrics have no labels)."""
    async with session.get(url.removesuffix("/v1") + "/metrics") as r:
        text = await r.text()
    return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if not ln.startswith("#")}


async def stream(url: str, path: str, body: dict) -> tuple[list[tuple[int, dict]], int]:
    """POST a streaming request; returns ([(arrival ns after send, parsed data)], ns at [DONE])."""
    out: list[tuple[int, dict]] = []
    async with aiohttp.ClientSession() as s:
        t0 = time.monotonic_ns()
        async with s.post(url + path, json=body) as r:
            assert r.status == 200, await r.text()
            assert r.headers["Content-Type"].startswith("text/event-stream")
            async for raw in r.content:
                line = raw.strip()
                if not line:
                    continue
                assert line.startswith(b"data: ")
                if line == b"data: [DONE]":
                    return out, time.monotonic_ns() - t0
                out.append((time.monotonic_ns() - t0, orjson.loads(line[6:])))
    raise AssertionError("stream ended without [DONE]")


def token_chunks(events: list[tuple[int, dict]], chat: bool) -> list[tuple[int, str]]:
    key = (lambda c: c["delta"].get("content")) if chat else (lambda c: c["text"])
    return [(t, key(d["choices"][0])) for t, d in events if d["choices"] and key(d["choices"][0])]


def test_completion_stream_timing_counts_usage(fixed_server):
    body = {
        "prompt": "one two three four five six seven",
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events, _ = asyncio.run(stream(fixed_server, "/completions", body))
    toks = token_chunks(events, chat=False)
    assert [text for _, text in toks] == [f" w{i}" for i in range(12)]  # one chunk per token, exactly 12
    # Token i is due at ttft + i * itl = 60 + 15 i ms after the request arrived (absolute deadlines). The client
    # can only see a token later than it was sent, so "not before its deadline" is exact. A loaded machine delays
    # reads by any amount, so the upper bound only catches pacing in a wrong unit (x1000), not a slow machine.
    for i, (t_ns, _) in enumerate(toks):
        due = 60_000_000 + 15_000_000 * i
        assert due - SLACK_NS <= t_ns < 10 * due + 5_000_000_000, (i, t_ns)
    finals = [d for _, d in events if d["choices"] and d["choices"][0]["finish_reason"]]
    assert [d["choices"][0]["finish_reason"] for d in finals] == ["length"]
    usage = events[-1][1]["usage"]
    assert events[-1][1]["choices"] == []
    assert usage == {
        "prompt_tokens": 7,
        "completion_tokens": 12,
        "total_tokens": 19,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_eos_min_tokens_and_ignore_eos(fixed_server):
    async def count(extra: dict) -> tuple[int, str]:
        body = {"prompt": "eos test " + str(extra), "max_tokens": 10, "stream": True, **extra}
        events, _ = await stream(fixed_server, "/completions", body)
        finish = [d["choices"][0]["finish_reason"] for _, d in events if d["choices"][0]["finish_reason"]]
        return len(token_chunks(events, chat=False)), finish[0]

    async def all_three():
        return await asyncio.gather(count({}), count({"min_tokens": 6}), count({"ignore_eos": True}))

    # eos_tokens=4: stops at 4 ("stop"); min_tokens=6 lifts it to max(4, 6) = 6; ignore_eos runs to max_tokens 10.
    assert asyncio.run(all_three()) == [(4, "stop"), (6, "stop"), (10, "length")]


def test_prefix_cache_reports_cached_tokens(fixed_server):
    words = " ".join(f"p{i}" for i in range(10))

    async def usage(prompt: str) -> dict:
        body = {"prompt": prompt, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}}
        events, _ = await stream(fixed_server, "/completions", body)
        return events[-1][1]["usage"]

    async def seq():
        return [await usage(words), await usage(words + " x y"), await usage(words[:8]), await usage(words)]

    first, longer, other, again = asyncio.run(seq())
    # Blocks of 4 words: 10 words = 2 full blocks (8 words) + 2 uncached. First sight: 0 cached.
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    # Same 10 words + 2 more = 12 words = 3 blocks; the first 2 were seen: 8 cached.
    assert longer["prompt_tokens"] == 12 and longer["prompt_tokens_details"]["cached_tokens"] == 8
    # words[:8] = "p0 p1 p2" = 3 words, less than one block: 0 cached.
    assert other["prompt_tokens"] == 3 and other["prompt_tokens_details"]["cached_tokens"] == 0
    # Repeated exactly: 2 full blocks cached = 8 (< 10, so no cap).
    assert again["prompt_tokens_details"]["cached_tokens"] == 8


def test_chat_multi_turn_stream(fixed_server):
    async def turn(messages: list[dict]) -> tuple[str, dict, dict]:
        body = {
            "messages": messages,
            "max_completion_tokens": 5,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        events, _ = await stream(fixed_server, "/chat/completions", body)
        assert events[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(t for _, t in token_chunks(events, chat=True))
        return text, events[-1][1]["usage"], events[-2][1]

    async def conversation():
        m1 = [{"role": "user", "content": "alpha beta gamma delta epsilon zeta eta"}]
        text1, u1, last1 = await turn(m1)
        m2 = m1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "theta iota"}]
        text2, u2, _ = await turn(m2)
        return text1, u1, last1, u2

    text1, u1, last1, u2 = asyncio.run(conversation())
    assert text1 == " w0 w1 w2 w3 w4" and last1["choices"][0]["finish_reason"] == "length"
    assert last1["object"] == "chat.completion.chunk"
    # Turn 1: "user: alpha ... eta" = 1 + 7 = 8 words. Turn 2 adds "assistant: w0..w4" (6) and "user: theta iota" (3).
    assert u1["prompt_tokens"] == 8 and u1["completion_tokens"] == 5
    assert u2["prompt_tokens"] == 8 + 6 + 3
    # Turn 1's 8 words are 2 full blocks of 4, all seen before: 8 cached.
    assert u2["prompt_tokens_details"]["cached_tokens"] == 8


def test_non_streaming_and_plain_endpoints(fixed_server):
    base = fixed_server.removesuffix("/v1")

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(
                fixed_server + "/chat/completions",
                json={"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3, "ignore_eos": True},
            ) as r:
                whole = await r.json()
            async with s.get(fixed_server + "/models") as r:
                models = await r.json()
            async with s.get(base + "/health") as r:
                health = r.status
            async with s.post(base + "/tokenize", json={"content": "a b  c\nd"}) as r:
                tok = await r.json()
            async with s.post(fixed_server + "/completions", data=b"{not json") as r:
                bad = (r.status, (await r.json())["error"]["type"])
            async with s.post(fixed_server + "/completions", json={"prompt": "x", "max_tokens": 0}) as r:
                bad_max = r.status
            return whole, models, health, tok, bad, bad_max

    whole, models, health, tok, bad, bad_max = asyncio.run(go())
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": " w0 w1 w2"}
    assert whole["usage"]["prompt_tokens"] == 3 and whole["usage"]["completion_tokens"] == 3  # "user: hi there"
    assert [m["id"] for m in models["data"]] == ["kvbench"]
    assert health == 200
    assert tok["count"] == 4 and len(tok["tokens"]) == 4
    assert bad == (400, "invalid_request_error") and bad_max == 400


def test_concurrent_requests_do_not_queue():
    # ttft 1 s each; 6 at once. Served in parallel, all 6 run at the server together (its requests_running gauge
    # reaches 6 during the shared second of waiting) and none is answered before its TTFT; served one after another
    # the gauge never passes 1. The gauge is polled until the streams end: no wall-clock bound to miss on a busy box.
    proc, url = start_serve("--target", "fixed:ttft_ms=1000,itl_ms=1")
    try:

        async def one(i: int) -> int:
            events, _ = await stream(url, "/completions", {"prompt": f"c{i}", "max_tokens": 2, "stream": True})
            return token_chunks(events, chat=False)[0][0]

        async def all_():
            streams = asyncio.gather(*(one(i) for i in range(6)))
            peak = 0.0
            async with aiohttp.ClientSession() as s:
                while not streams.done() and peak < 6:
                    peak = max(peak, (await scrape(s, url))["kvbench:requests_running"])
                    await asyncio.sleep(0.01)
            return await streams, peak

        ttfts, peak = asyncio.run(all_())
        assert peak == 6
        assert min(ttfts) >= 1_000_000_000 - SLACK_NS
    finally:
        stop(proc)


def test_metrics_count_what_was_served():
    proc, url = start_serve("--target", "fixed:ttft_ms=0,itl_ms=0", "--block-tokens", "2")

    async def go():
        for _ in range(2):  # "a b c d e" = 5 tokens; second time 2 blocks of 2 = 4 cached
            await stream(url, "/completions", {"prompt": "a b c d e", "max_tokens": 3, "stream": True})
        async with aiohttp.ClientSession() as s:
            return await scrape(s, url)

    try:
        values = asyncio.run(go())
    finally:
        stop(proc)
    late_sum = values.pop("kvbench:token_lateness_seconds_sum")
    late_max = values.pop("kvbench:token_lateness_seconds_max")
    assert 0 <= late_max <= late_sum  # the 6 tokens' lateness past their deadlines: machine-dependent, not zero
    assert values == {
        "kvbench:requests_total": 2,
        "kvbench:requests_running": 0,
        "kvbench:prompt_tokens_total": 10,
        "kvbench:prompt_tokens_cached_total": 4,
        "kvbench:generation_tokens_total": 6,
        "kvbench:request_errors_total": 0,
        "kvbench:client_disconnects_total": 0,
    }


def test_client_disconnect_mid_stream_is_counted_not_a_traceback():
    proc, url = start_serve("--target", "fixed:ttft_ms=0,itl_ms=30")

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/completions", json={"prompt": "a", "max_tokens": 100, "stream": True}) as r:
                got = 0
                async for raw in r.content:
                    got += raw.startswith(b"data: ")
                    if got == 3:
                        break  # leaving the block closes the connection mid-stream
            # The server notices the closed connection at its next token write (every 30 ms): wait for the count.
            for _ in range(1000):
                values = await scrape(s, url)
                if values["kvbench:client_disconnects_total"]:
                    return values
                await asyncio.sleep(0.03)
            return values

    try:
        values = asyncio.run(go())
    finally:
        stop(proc)
    assert values["kvbench:client_disconnects_total"] == 1 and values["kvbench:requests_running"] == 0
    assert 3 <= values["kvbench:generation_tokens_total"] < 100  # counts what was written, not what was asked
    assert "Traceback" not in proc.stderr.read()


@pytest.mark.parametrize(
    "target, needle",
    [
        ("fixed:ttft_ms=-1", "fixed:ttft_ms=-1: ttft_ms must be a number >= 0, got -1"),
        ("fixed:ttft_ms=5,servers=2", "unknown key 'servers'; allowed: eos_tokens, itl_ms, kind, prefill_us_per_token"),
        ("http://127.0.0.1:1/v1", "--target must be fixed"),
    ],
)
def test_bad_target_is_one_line_exit_2(target, needle):
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", "serve", "--port", "0", "--target", target]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.startswith("kvbench: error: ") and needle in r.stderr and r.stderr.count("\n") == 1


def test_sim_target_timing_follows_one_request_simulation():
    from kvbench.serve.sim_timing import simulate_one
    from kvbench.targets import resolve

    # What the default preset's cluster gives one 40-token prompt with 8 output tokens, alone, in virtual time.
    want = simulate_one(resolve("sim"), 0, 40, 8)
    assert want.ttft_ns > 0 and want.itl_ns > 0
    proc, url = start_serve("--target", "sim")
    try:
        body = {
            "prompt": " ".join(f"s{i}" for i in range(40)),
            "max_tokens": 8,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        events, _ = asyncio.run(stream(url, "/completions", body))
    finally:
        stop(proc)
    toks = token_chunks(events, chat=False)
    assert len(toks) == 8 and events[-1][1]["usage"]["prompt_tokens"] == 40
    assert toks[0][0] >= want.ttft_ns - SLACK_NS  # the first token is not sent before the simulated TTFT
    # Token 8 is due at ttft + 7 * itl after the request arrived.
    assert toks[-1][0] >= want.ttft_ns + 7 * want.itl_ns - SLACK_NS
    assert toks[-1][0] < 10 * (want.ttft_ns + 7 * want.itl_ns) + 5_000_000_000  # a wrong unit, not a slow machine


def test_replay_through_kvbench_serve(tmp_path):
    """kvbench's own client against kvbench serve: exact lengths, TTFT not below the configured 40 ms, and
    cached tokens equal to the trace's reuse (a 512-token block is 512 words; the serve cache's 16-word blocks
    tile it exactly, and the next, different block breaks the match at a 16-word boundary)."""
    import json

    import duckdb

    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload.load import from_trace

    # (hash_ids, input tokens, output tokens). A block that is reused later is full where first seen: the trace
    # counts a reused id as 512 tokens even if its first request had only a partial block of it.
    rows = [
        ([1, 2, 3], 1064, 8),
        ([1, 2, 4], 1064, 12),
        ([5, 6], 552, 4),
        ([1, 7, 11], 1536, 6),
        ([1, 7, 11, 12], 1600, 10),
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 100 * i, "input_length": n, "output_length": out, "hash_ids": ids}) + "\n"
            for i, (ids, n, out) in enumerate(rows)
        )
    )
    proc, url = start_serve("--target", "fixed:ttft_ms=40,itl_ms=2")
    try:
        run_dir, stats = execute(from_trace(trace), resolve(url), RunOptions(seed=0, out=tmp_path / "run"))
    finally:
        stop(proc)
    assert stats.finished == 5
    got = (
        duckdb.connect()
        .sql(
            f"SELECT f.req_id, f.tokens, f.cached_tokens, r.trace_reuse_tokens, r.output_tokens, s.t_ns - a.t_ns "
            f"FROM read_parquet('{run_dir}/events/*.parquet') f JOIN read_parquet('{run_dir}/requests/*.parquet') r "
            f"USING (req_id) JOIN read_parquet('{run_dir}/events/*.parquet') s USING (req_id) "
            f"JOIN read_parquet('{run_dir}/events/*.parquet') a USING (req_id) "
            f"WHERE f.kind = 'FINISH' AND s.kind = 'FIRST_TOKEN' AND a.kind = 'SEND' ORDER BY f.req_id"
        )
        .fetchall()
    )
    # Reuse by hand: [1,2,3] 0; [1,2,4] 1,2 seen = 1024; [5,6] 0; [1,7,11] 1 = 512; [1,7,11,12] 1,7,11 = 1536.
    assert [(g[2], g[3]) for g in got] == [(0, 0), (1024, 1024), (0, 0), (512, 512), (1536, 1536)]
    assert all(g[1] == g[4] for g in got)  # FINISH tokens == output tokens asked
    assert all(g[5] >= 40_000_000 - SLACK_NS for g in got)  # first token not before ttft after the send
