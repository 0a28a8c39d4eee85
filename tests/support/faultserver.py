"""A real OpenAI-compatible streaming server on 127.0.0.1 that injects faults, for the HTTP target's tests.

The fault of a request is named by its prompt's first word, `fault=NAME` (a Request with `prompt` set, see
`fault_prompt`); synthesised prompts get "ok". So one workload mixes faults deterministically. Its "tokenizer" counts 2 tokens per word
plus 1 (BOS), and it keeps a line-granular prefix cache (a prompt's leading lines seen before count as cached),
so calibration and cached-token reporting are checked against numbers computed by hand.
"""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web

FAULTS = (
    "ok",
    "reset",
    "http_429_body",
    "http_429_empty",
    "http_500_body",
    "http_503_empty",
    "stall",
    "malformed_sse",
    "invalid_json",
    "no_done",
    "short",
    "huge",
    "split_crlf",
    "stall_headers",
    "error_obj",
)
HUGE_BYTES = 4 << 20  # the huge chunk: one 4 MiB data line


def fault_prompt(fault: str, words: int = 10) -> str:
    """A prompt text that asks the server for `fault`; it counts 2 * words + 1 tokens."""
    assert fault in FAULTS
    return " ".join([f"fault={fault}"] + ["filler"] * (words - 1)) + "\n"


def fault_of(prompt: str) -> str:
    first = prompt.split(maxsplit=1)[0] if prompt.strip() else ""
    return first[6:] if first.startswith("fault=") and first[6:] in FAULTS else "ok"


def count_tokens(text: str) -> int:
    return 2 * len(text.split()) + 1


class FaultServer:
    """Runs in a thread with its own loop; `base_url` ends in /v1. `ttft_s` delays the first token."""

    def __init__(self, ttft_s: float = 0.0, itl_s: float = 0.0, stall_s: float = 2.0):
        self.ttft_s, self.itl_s, self.stall_s = ttft_s, itl_s, stall_s
        self.seen_prefixes: set[str] = set()
        self.requests: list[dict] = []  # bodies received, in order
        self.headers: list[dict] = []  # their HTTP headers
        self.client_ports: list[int] = []  # the client's port per request: equal ports = a reused connection
        self.metrics_scrapes = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        assert self._ready.wait(10), "fault server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:  # handlers still sleeping (stalls): end them here, not at garbage collection
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fault-model", "object": "model"}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(count_tokens(body["content"])))})

    async def _metrics(self, request: web.Request) -> web.Response:
        self.metrics_scrapes += 1
        text = (
            "# HELP llamacpp:requests_processing Number of requests processing.\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {len(self.requests)}\n"
            'vllm:num_requests_running{model_name="fault-model"} 2\n'
            "process_cpu_seconds_total 1.5\n"
        )
        return web.Response(text=text, content_type="text/plain")

    def _prompt_of(self, body: dict) -> str:
        return body["messages"][-1]["content"] if "messages" in body else body["prompt"]

    def _cached(self, prompt: str) -> int:
        """Tokens of the leading lines whose whole prefix was seen in an earlier prompt (2 per word)."""
        lines, cached, prefix = prompt.splitlines(keepends=True), 0, ""
        hit = True
        for line in lines:
            prefix += line
            if hit and prefix in self.seen_prefixes:
                cached += 2 * len(line.split())
            else:
                hit = False
            self.seen_prefixes.add(prefix)
        return cached

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.client_ports.append(request.transport.get_extra_info("peername")[1])
        prompt = self._prompt_of(body)
        fault, n = fault_of(prompt), body["max_tokens"]
        usage = {
            "prompt_tokens": count_tokens(prompt),
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": self._cached(prompt)},
        }
        if fault.startswith("http_"):
            code, with_body = int(fault[5:8]), fault.endswith("body")
            text = json.dumps({"error": {"message": f"injected {code}"}}) if with_body else ""
            return web.Response(status=code, text=text, content_type="application/json")
        if not body.get("stream"):  # the calibration probe: one JSON answer with usage
            text = " ".join(f"w{i}" for i in range(n))
            return web.json_response(
                {"choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage}
            )
        if fault == "stall_headers":
            await asyncio.sleep(self.stall_s)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await resp.prepare(request)
            await self._stream(request, resp, fault, n, usage, "messages" in body)
        except (ConnectionError, OSError):
            pass  # the client gave up (its read timeout): nothing to send it
        return resp

    def _chunk(self, text: str, chat: bool, finish: str | None = None) -> bytes:
        choice = {"index": 0, "finish_reason": finish}
        choice.update({"delta": {"content": text}} if chat else {"text": text})
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    async def _stream(self, request, resp, fault: str, n: int, usage: dict, chat: bool) -> None:
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        sent = n // 2 if fault in ("reset", "short") else (2 if fault == "stall" else n)
        sent = min(sent, 1) if fault in ("malformed_sse", "invalid_json", "error_obj") else sent
        for i in range(sent):
            text = "x" * HUGE_BYTES if fault == "huge" and i == 0 else f" w{i}"
            await self._write(resp, self._chunk(text, chat), fault)
            if self.itl_s:
                await asyncio.sleep(self.itl_s)
        if fault == "reset":
            request.transport.abort()
            return
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
        tail = {
            "malformed_sse": b"garbage line without a field\n\n",
            "invalid_json": b"data: {not json\n\n",
            "error_obj": b'data: {"error": {"message": "injected in-stream error", "code": 500}}\n\n',
        }
        if fault in tail:
            await resp.write(tail[fault])
            return
        if fault == "no_done":
            return
        usage = {**usage, "completion_tokens": sent}
        await self._write(resp, self._chunk("", chat, "stop" if fault == "short" else "length"), fault)
        await self._write(resp, b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n", fault)
        await self._write(resp, b"data: [DONE]\n\n", fault)

    async def _write(self, resp: web.StreamResponse, data: bytes, fault: str) -> None:
        if fault != "split_crlf":
            await resp.write(data)
            return
        data = b": keep-alive\r\n" + data.replace(b"\n", b"\r\n")  # CRLF, a comment, and 3-byte writes
        for i in range(0, len(data), 3):
            await resp.write(data[i : i + 3])
            await asyncio.sleep(0)
