"""A real OpenAI-compatible streaming server on 127.0.0.1 that injects faults, for the HTTP target's tests.

The fault of a request is named by its prompt's first word, `fault=NAME` (a Request with `prompt` set, see
`fault_prompt`); synthesised prompts get "ok". So one workload mixes faults deterministically. Its "tokenizer" counts
2 tokens per word plus 1 (BOS), and it keeps a line-granular prefix cache (a prompt's leading lines seen before count
as cached), so calibration and cached-token reporting are checked against numbers computed by hand.

The server runs in its own process (forked from a forkserver that has aiohttp loaded), so its writes never compete
with the client under test for one GIL: a test's read timeouts then measure the client and the server, not the
interpreter's thread switching. What it received is read back over HTTP (`GET /_state`).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

import duckdb
from aiohttp import web

from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.target import TargetSpec
from kvbench.workload.load import Workload

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
    "multiline_huge",
    "multiline_over",
    "slow_loris",
    "redirect_same",
    "redirect_cross",
    "redirect_loop",
    "retry_after_503",
    "retry_after_429",
    "retry_after_long",
    "usage_over",
    "echo_auth",
)
HUGE_BYTES = 4 << 20  # the huge chunk: one 4 MiB data line
MULTILINE_LINES = 4000  # the multi-line event: this many data lines of MULTILINE_LINE_BYTES, one JSON chunk
MULTILINE_LINE_BYTES = 500  # (~2 MB); multiline_over sends four times as many lines (~8 MB)
LORIS_GAP_S = 0.05  # slow loris: an SSE comment this often, forever (never silent long enough to be a stall)
REDIRECTED_PATH = "/v1/redirected/completions"  # where redirect_same points (same origin); it streams normally
CROSS_ORIGIN = "http://198.51.100.7:8000/v1/completions"  # where redirect_cross points (TEST-NET-2, never dialled)
RETRY_AFTER_S = 1  # retry_after_*: the first attempt's Retry-After; retry_after_long asks for an hour
_CTX = multiprocessing.get_context("forkserver")


def fault_prompt(fault: str, words: int = 10, tag: str = "") -> str:
    """A prompt text that asks the server for `fault`; it counts 2 * words + 1 tokens. A `tag` (one word, in
    place of the first filler) makes the text unique, so the server tells this request's retries apart."""
    assert fault in FAULTS and words >= 2 and len(tag.split()) <= 1
    return " ".join([f"fault={fault}", tag or "filler"] + ["filler"] * (words - 2)) + "\n"


def fault_of(prompt: str) -> str:
    first = prompt.split(maxsplit=1)[0] if prompt.strip() else ""
    return first[6:] if first.startswith("fault=") and first[6:] in FAULTS else "ok"


def count_tokens(text: str) -> int:
    return 2 * len(text.split()) + 1


FAST = {"model": "fault-model", "word_tokens": 2.0, "read_timeout_s": 0.3}  # no probes; stalls end in 0.3 s


def run(requests: list[Request], base_url: str, out: Path, concurrency: int | None = None, **params) -> tuple:
    """Replay `requests` through the openai target at `base_url` (FAST, then `params`): (run_dir, stats)."""
    wl = Workload("t", "mem", "0", lambda: iter(requests))
    spec = TargetSpec("openai", "fault", {"kind": "openai", "base_url": base_url, **FAST, **params})
    return execute(wl, spec, RunOptions(out=out, concurrency=concurrency))


def q(run_dir: Path, sql: str) -> list[tuple]:
    """`sql` over the run's events, named EV."""
    return duckdb.connect().execute(sql.replace("EV", f"read_parquet('{run_dir}/events/*.parquet')")).fetchall()


class FaultServer:
    """The server process; `base_url` ends in /v1. `ttft_s` delays the first token, `itl_s` each later one;
    `redirect_status` is redirect_same's status; with `fail_every` = k, every k-th completion request received
    is answered with the fault `fail_with` whatever its prompt (for synthesised prompts, which name no fault)."""

    def __init__(
        self,
        ttft_s: float = 0.0,
        itl_s: float = 0.0,
        stall_s: float = 2.0,
        redirect_status: int = 307,
        fail_every: int = 0,
        fail_with: str = "http_500_body",
    ):
        assert fail_with in FAULTS
        self._args = (ttft_s, itl_s, stall_s, redirect_status, fail_every, fail_with)
        self._pipe: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict]:
        """Bodies received, in order."""
        return self._state()["requests"]

    @property
    def headers(self) -> list[dict]:
        """Their HTTP headers."""
        return self._state()["headers"]

    @property
    def client_ports(self) -> list[int]:
        """The client's port per request: equal ports = a reused connection."""
        return self._state()["client_ports"]

    @property
    def paths(self) -> list[str]:
        """The path each request was posted to."""
        return self._state()["paths"]

    def _state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_state", timeout=10) as r:
            return json.loads(r.read())

    def __enter__(self) -> FaultServer:
        _CTX.set_forkserver_preload(["support.faultserver"])  # each server then starts in milliseconds
        mine, theirs = _CTX.Pipe()
        self._proc = _CTX.Process(target=_serve, args=(theirs, *self._args), daemon=True)
        self._proc.start()
        theirs.close()
        assert mine.poll(30), "fault server did not start"
        self.port, self._pipe = mine.recv(), mine
        return self

    def __exit__(self, *exc) -> None:
        assert self._pipe is not None and self._proc is not None
        self._pipe.close()  # the server stops when its end of the pipe reads end-of-file
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)


def _serve(pipe: Connection, *args) -> None:
    """The server process: bind port 0, send the port up the pipe, serve until the pipe closes."""
    asyncio.run(_App(*args).main(pipe))


class _App:
    def __init__(self, ttft_s: float, itl_s: float, stall_s: float, redirect_status: int, fail_every: int, fail_with):
        self.ttft_s, self.itl_s, self.stall_s, self.redirect_status = ttft_s, itl_s, stall_s, redirect_status
        self.fail_every, self.fail_with = fail_every, fail_with
        self.seen_prefixes: set[str] = set()
        self.attempts: dict[str, int] = {}  # per prompt text: how many times it was asked for
        self.state: dict[str, list] = {"requests": [], "headers": [], "client_ports": [], "paths": []}
        self.origin = ""

    async def main(self, pipe: Connection) -> None:
        stop = asyncio.Event()
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post(REDIRECTED_PATH, self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/_state", self._state)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.origin = f"http://127.0.0.1:{port}"
        loop = asyncio.get_running_loop()
        loop.add_reader(pipe.fileno(), stop.set)  # readable = the test closed its end
        pipe.send(port)
        await stop.wait()
        loop.remove_reader(pipe.fileno())
        await runner.cleanup()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:  # handlers still sleeping (stalls): end them here, not at garbage collection
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fault-model", "object": "model"}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(count_tokens(body["content"])))})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = (
            "# HELP llamacpp:requests_processing Number of requests processing.\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {len(self.state['requests'])}\n"
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

    def _status(self, fault: str, attempt: int, request: web.Request) -> web.Response | None:
        """The non-200 answer of a fault (None: stream): error statuses, redirects, Retry-After on a first try."""
        path = request.path
        if fault == "echo_auth":  # a careless server quoting the credentials it refused, in a 401 body
            text = json.dumps({"error": {"message": f"invalid credentials {request.headers.get('Authorization')}"}})
            return web.Response(status=401, text=text, content_type="application/json")
        if fault.startswith("http_"):
            code, with_body = int(fault[5:8]), fault.endswith("body")
            text = json.dumps({"error": {"message": f"injected {code}"}}) if with_body else ""
            return web.Response(status=code, text=text, content_type="application/json")
        if fault.startswith("retry_after") and attempt == 1:
            code, wait = (429 if fault.endswith("429") else 503), (3600 if fault.endswith("long") else RETRY_AFTER_S)
            return web.Response(status=code, headers={"Retry-After": str(wait)})
        if fault == "redirect_same" and path != REDIRECTED_PATH:
            return web.Response(status=self.redirect_status, headers={"Location": REDIRECTED_PATH})
        if fault == "redirect_cross":
            return web.Response(status=302, headers={"Location": CROSS_ORIGIN})
        if fault == "redirect_loop":  # absolute, to itself: followed until the client's hop limit
            return web.Response(status=308, headers={"Location": f"{self.origin}{path}"})
        return None

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.state["requests"].append(body)
        self.state["headers"].append(dict(request.headers))
        self.state["client_ports"].append(request.transport.get_extra_info("peername")[1])
        self.state["paths"].append(request.path)
        prompt = self._prompt_of(body)
        fault, n = fault_of(prompt), body["max_tokens"]
        if self.fail_every and body.get("stream") and len(self.state["requests"]) % self.fail_every == 0:
            fault = self.fail_with
        self.attempts[prompt] = attempt = self.attempts.get(prompt, 0) + 1
        usage = {
            "prompt_tokens": count_tokens(prompt),
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": self._cached(prompt)},
        }
        answer = self._status(fault, attempt, request)
        if answer is not None:
            return answer
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

    def _multiline(self, text: str, chat: bool, lines: int) -> bytes:
        """One token chunk as one SSE event of `lines` data lines: its JSON with a padding array, an element
        a line (JSON allows the LF that joins the lines between elements)."""
        head = self._chunk(text, chat)[6:-3] + b',"pad":['  # the object without its closing brace
        pad = b'"' + b"p" * (MULTILINE_LINE_BYTES - 3) + b'",'
        body = [b"data: " + head] + [b"data: " + pad] * (lines - 1) + [b'data: ""]}']
        return b"\n".join(body) + b"\n\n"

    async def _stream(self, request, resp, fault: str, n: int, usage: dict, chat: bool) -> None:
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        if fault == "slow_loris":  # headers sent, then a keep-alive comment every LORIS_GAP_S: never a token
            while True:
                await resp.write(b": still thinking\n\n")
                await asyncio.sleep(LORIS_GAP_S)
        sent = n // 2 if fault in ("reset", "short", "usage_over") else (2 if fault == "stall" else n)
        sent = min(sent, 1) if fault in ("malformed_sse", "invalid_json", "error_obj", "multiline_over") else sent
        for i in range(sent):
            await self._write(resp, self._token(fault, i, chat), fault)
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
        if fault == "multiline_over":  # one more token, in an event over the test's max_event_bytes
            await resp.write(self._multiline(" big", chat, 4 * MULTILINE_LINES))
            return
        if fault == "no_done":
            return
        usage = {**usage, "completion_tokens": n if fault == "usage_over" else sent}
        await self._write(resp, self._chunk("", chat, "stop" if fault == "short" else "length"), fault)
        await self._write(resp, b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n", fault)
        await self._write(resp, b"data: [DONE]\n\n", fault)

    def _token(self, fault: str, i: int, chat: bool) -> bytes:
        if i == 0 and fault == "huge":
            return self._chunk("x" * HUGE_BYTES, chat)
        if i == 0 and fault == "multiline_huge":
            return self._multiline(" w0", chat, MULTILINE_LINES)
        return self._chunk(f" w{i}", chat)

    async def _write(self, resp: web.StreamResponse, data: bytes, fault: str) -> None:
        if fault != "split_crlf":
            await resp.write(data)
            return
        data = b": keep-alive\r\n" + data.replace(b"\n", b"\r\n")  # CRLF, a comment, and 3-byte writes
        for i in range(0, len(data), 3):
            await resp.write(data[i : i + 3])
            await asyncio.sleep(0)
