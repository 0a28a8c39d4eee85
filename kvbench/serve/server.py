"""`kvbench serve`: an OpenAI-compatible streaming server whose timing follows fixed TTFT/ITL or the simulator.

Endpoints: POST /v1/completions, POST /v1/chat/completions (streaming or not), GET /v1/models, GET /health,
GET /metrics (Prometheus text), POST /tokenize. What it does, so clients can be tested against known numbers:
- Tokens are whitespace-separated words: a prompt of N words is N prompt tokens; a chat prompt is the words of
  "role: content" per message. Every generated token is one word (" w"), so it re-tokenizes to one token.
- Output length is `max_tokens` (chat also `max_completion_tokens`; default 16). With `eos_tokens=N` in the
  target the output "hits EOS" after max(N, min_tokens) tokens unless the request sets `ignore_eos`.
- Prefix cache: the prompt's tokens in blocks of `block_tokens`, each named by a hash of everything up to its end
  (an LRU of `cache_blocks` blocks); cached tokens = leading blocks already seen, never the whole prompt (one
  token is always computed), as vLLM does. Reported as `usage.prompt_tokens_details.cached_tokens`.
- Timing: a `Plan` per request from the target: the first token `ttft_ns` after the request body arrived, then
  one token every `itl_ns`, each at an absolute deadline (sleeps never accumulate drift). Requests do not
  queue behind each other: every request is served as if alone. `fixed:` plans are constant (plus an optional
  per-uncached-token prefill cost); `sim[:PRESET]` plans come from a one-request simulator run
  (kvbench/serve/sources.py picks one; serve/sim_timing.py says what the sim one models and leaves out).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kvbench.config import ConfigError
from kvbench.serve.requests import Job, chat_text, completion_words, parse_job
from kvbench.serve.sources import planner_for
from kvbench.serve.timing import Plan, Planner
from kvbench.target import TargetSpec
from kvbench.units import NS_PER_S

VOCAB = 32_000  # token ids reported by /tokenize are crc32(word) % VOCAB
SPIN_NS = 1_200_000  # epoll rounds timeouts up to whole ms: sleep to this close to a deadline, then yield-poll


@dataclass(frozen=True)
class ServeOptions:
    model: str = "kvbench"
    block_tokens: int = 16
    cache_blocks: int = 65_536
    max_model_len: int = 1_000_000
    eos_tokens: int = 0  # 0: never stops early
    plan_in_thread: bool = False  # slow planners (a sim run) must not stall the other streams' writes


class PrefixCache:
    """Block-hash LRU over prompt tokens: a block's key hashes every token up to its end."""

    __slots__ = ("block_tokens", "capacity", "_blocks")

    def __init__(self, block_tokens: int, capacity: int):
        self.block_tokens, self.capacity = block_tokens, capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def lookup_insert(self, tokens: list[str]) -> int:
        """Cached tokens for this prompt (leading blocks seen before), then remember all its full blocks."""
        h, hit, counting = hashlib.blake2b(digest_size=16), 0, True
        bt = self.block_tokens
        for start in range(0, len(tokens) - bt + 1, bt):
            h.update("\x00".join(tokens[start : start + bt]).encode() + b"\x01")
            key = h.digest()
            if counting and key in self._blocks:
                hit += bt
                self._blocks.move_to_end(key)
            else:
                counting = False
                self._blocks[key] = None
                if len(self._blocks) > self.capacity:
                    self._blocks.popitem(last=False)
        return min(hit, max(len(tokens) - 1, 0))  # the last prompt token is always computed


class Counters:
    __slots__ = (
        "requests",
        "running",
        "prompt_tokens",
        "cached_tokens",
        "generation_tokens",
        "errors",
        "disconnects",
        "late_sum_ns",
        "late_max_ns",
    )

    def __init__(self) -> None:
        self.requests = self.running = self.prompt_tokens = self.cached_tokens = 0
        self.generation_tokens = self.errors = self.disconnects = 0
        self.late_sum_ns = self.late_max_ns = 0  # streamed token written after its deadline, by how much

    def late(self, ns: int) -> None:
        if ns > 0:
            self.late_sum_ns += ns
            if ns > self.late_max_ns:
                self.late_max_ns = ns

    def prometheus(self) -> str:
        rows = [
            ("requests_total", "counter", self.requests),
            ("requests_running", "gauge", self.running),
            ("prompt_tokens_total", "counter", self.prompt_tokens),
            ("prompt_tokens_cached_total", "counter", self.cached_tokens),
            ("generation_tokens_total", "counter", self.generation_tokens),
            ("request_errors_total", "counter", self.errors),
            ("client_disconnects_total", "counter", self.disconnects),
            # streamed tokens: seconds between each token's deadline and its write (the server's own lateness)
            ("token_lateness_seconds_sum", "counter", self.late_sum_ns / NS_PER_S),
            ("token_lateness_seconds_max", "gauge", self.late_max_ns / NS_PER_S),
        ]
        return "".join(f"# TYPE kvbench:{n} {t}\nkvbench:{n} {v}\n" for n, t, v in rows)


def make_app(planner: Planner, opts: ServeOptions) -> web.Application:
    """The aiohttp application; state (cache, counters) lives on the app, never at module level."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    gen = Generator(planner, opts, PrefixCache(opts.block_tokens, opts.cache_blocks), Counters())
    app["gen"] = gen
    app.add_routes(
        [
            web.post("/v1/completions", gen.completions),
            web.post("/v1/chat/completions", gen.chat),
            web.get("/v1/models", gen.models),
            web.get("/health", _health),
            web.get("/metrics", gen.metrics),
            web.post("/tokenize", gen.tokenize),
        ]
    )
    return app


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def token_ids(words: list[str]) -> list[int]:
    return [zlib.crc32(w.encode()) % VOCAB for w in words]


def error_response(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


async def serve_forever(
    planner: Planner, opts: ServeOptions, host: str, port: int, ready: Callable[[str], None]
) -> None:
    """Listen on host:port (0: the OS picks), call `ready(base_url)` once bound, serve until cancelled."""
    runner = web.AppRunner(make_app(planner, opts), access_log=None, handle_signals=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_port = runner.addresses[0][1]
    ready(f"http://{host if ':' not in host else f'[{host}]'}:{bound_port}/v1")
    try:
        while True:
            await asyncio.sleep(3600)
    finally:
        await runner.cleanup()


class Generator:
    """The request handlers: parse, look up the prefix cache, plan, then stream one word per token on schedule."""

    __slots__ = ("plan", "opts", "cache", "counters", "_seq")

    def __init__(self, planner: Planner, opts: ServeOptions, cache: PrefixCache, counters: Counters):
        self.plan, self.opts, self.cache, self.counters = planner, opts, cache, counters
        self._seq = 0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        t0 = time.monotonic_ns()  # the plan is timed from here: the whole body has arrived
        try:
            job = parse_job(orjson.loads(await request.read()), chat, self.opts.eos_tokens)
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            self.counters.errors += 1
            return error_response(400, str(e))
        c = self.counters
        cached = self.cache.lookup_insert(job.prompt_tokens)
        if self.opts.plan_in_thread:
            plan = await asyncio.to_thread(self.plan, len(job.prompt_tokens), cached, job.out_tokens)
        else:
            plan = self.plan(len(job.prompt_tokens), cached, job.out_tokens)
        self._seq += 1
        c.requests += 1
        c.running += 1
        c.prompt_tokens += len(job.prompt_tokens)
        c.cached_tokens += cached
        stream = _Stream(request, job, self.opts.model, self._seq, cached, plan, t0, c)
        try:
            return await (stream.sse() if job.stream else stream.whole())
        except ConnectionResetError:  # the client went away mid-stream: normal for a server, not an error here
            c.disconnects += 1
            return web.Response(status=499)  # never sent: the connection is gone
        finally:
            c.running -= 1
            c.generation_tokens += stream.sent

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.opts.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": "kvbench",
                        "max_model_len": self.opts.max_model_len,
                    }
                ],
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.counters.prometheus(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Prometheus-Format": "0.0.4"},
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """llama.cpp style {"content": ...}, vLLM style {"prompt": ...} or {"messages": [...]}."""
        try:
            body = orjson.loads(await request.read())
            if "messages" in body:
                words = chat_text(body["messages"]).split()
            else:
                words = completion_words(body.get("content", body.get("prompt")))
        except (ValueError, TypeError, AttributeError) as e:
            return error_response(400, str(e))
        return web.json_response(
            {"tokens": token_ids(words), "count": len(words), "max_model_len": self.opts.max_model_len}
        )


class _Stream:
    """One response: chunks of the OpenAI streaming format written at the plan's absolute deadlines."""

    __slots__ = ("request", "job", "model", "rid", "cached", "plan", "t0_ns", "created", "sent", "counters")

    def __init__(
        self,
        request: web.Request,
        job: Job,
        model: str,
        seq: int,
        cached: int,
        plan: Plan,
        t0_ns: int,
        counters: Counters,
    ):
        self.request, self.job, self.model, self.cached, self.plan = request, job, model, cached, plan
        self.rid = f"{'chatcmpl' if job.chat else 'cmpl'}-{seq}"
        self.t0_ns, self.created = t0_ns, time.time_ns() // NS_PER_S
        self.sent = 0  # tokens written to the client so far
        self.counters = counters

    def usage(self) -> dict:
        p, n = len(self.job.prompt_tokens), self.job.out_tokens
        return {
            "prompt_tokens": p,
            "completion_tokens": n,
            "total_tokens": p + n,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }

    def finish_reason(self) -> str:
        return "length" if self.job.out_tokens == self.job.max_tokens else "stop"

    def chunk(self, text: str | None, finish: str | None) -> bytes:
        if self.job.chat:
            delta = {} if text is None else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        body = {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    async def _until(self, deadline_ns: int) -> None:
        """Sleep to within SPIN_NS of the deadline (loop timers wake up to ~1 ms late), then yield until it."""
        delay = deadline_ns - time.monotonic_ns()
        if delay > SPIN_NS:
            await asyncio.sleep((delay - SPIN_NS) / NS_PER_S)
        while time.monotonic_ns() < deadline_ns:
            await asyncio.sleep(0)

    async def sse(self) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(self.request)
        if self.job.chat:  # role first, as OpenAI and vLLM do; it carries no token
            await resp.write(
                b"data: "
                + orjson.dumps(
                    {
                        "id": self.rid,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                    }
                )
                + b"\n\n"
            )
        first, itl = self.t0_ns + self.plan.ttft_ns, self.plan.itl_ns
        n = self.job.out_tokens
        for i in range(n):
            await self._until(first + i * itl)
            await resp.write(self.chunk(f" w{i}", None))
            self.counters.late(time.monotonic_ns() - first - i * itl)
            self.sent += 1
        await resp.write(self.chunk(None, self.finish_reason()))
        if self.job.include_usage:
            body: dict[str, Any] = {
                "id": self.rid,
                "object": "chat.completion.chunk" if self.job.chat else "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.usage(),
            }
            await resp.write(b"data: " + orjson.dumps(body) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def whole(self) -> web.Response:
        n = self.job.out_tokens
        await self._until(self.t0_ns + self.plan.ttft_ns + max(n - 1, 0) * self.plan.itl_ns)
        text = "".join(f" w{i}" for i in range(n))
        self.sent = n
        if self.job.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": self.finish_reason(),
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": self.finish_reason()}
        body = {
            "id": self.rid,
            "object": "chat.completion" if self.job.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(),
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")


def run_server(
    spec: TargetSpec, opts: ServeOptions, host: str, port: int, seed: int = 0, ready: Callable[[str], None] = print
) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code."""
    from aiohttp.web_runner import GracefulExit

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {port}")
    if opts.block_tokens < 1 or opts.cache_blocks < 0:
        raise ConfigError("--block-tokens must be >= 1 and --cache-blocks >= 0")
    planner, eos = planner_for(spec, seed)
    opts = ServeOptions(
        opts.model, opts.block_tokens, opts.cache_blocks, opts.max_model_len, eos, plan_in_thread=spec.kind == "sim"
    )
    try:
        asyncio.run(serve_forever(planner, opts, host, port, ready))
    except (KeyboardInterrupt, GracefulExit):
        pass
    except OSError as e:  # address in use, cannot bind
        raise ConfigError(f"kvbench serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    return 0
