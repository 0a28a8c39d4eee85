"""OpenAITarget: open-loop streaming client for /v1/completions and /v1/chat/completions that measures right.

Timing rules: a request is released at t0 + at_ns (absolute, so no drift accumulates; a coarse loop timer then
a short spin for the last `SPIN_NS`), ARRIVE is stamped with the intended time, SEND just before the request is
handed to the connection, and every token event with time.monotonic_ns() taken as soon as the read returns the
chunk's bytes. One read carrying k tokens is one event with tokens = k.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from heapq import heappop, heappush

import aiohttp
import orjson

from kvbench.http.faults import RETRYABLE, StreamFault, classify, classify_status, one_line
from kvbench.http.probe import auth_headers, prepare
from kvbench.http.profile import EndpointProfile, load_profile
from kvbench.http.prompts import PromptBuilder
from kvbench.http.scrape import scrape_loop
from kvbench.http.sse import SSEParser
from kvbench.records import (ARRIVE, CANCEL, CHUNK, ERROR, FINISH, FIRST_TOKEN, LAST_TOKEN, REJECT, SEND, Emit,
                             Event, Request)
from kvbench.target import RunContext, TargetSpec
from kvbench.units import NS_PER_MS, s_to_ns

SPIN_NS = NS_PER_MS  # loop timers have ~1 ms resolution: sleep until this close, then yield-poll the loop
ERROR_BODY_BYTES = 4096  # of a non-200 response body kept for the detail


try:  # imported with the module (before the run's t0), not when the run starts
    import uvloop

    LOOP_FACTORY = uvloop.new_event_loop
except ImportError:
    LOOP_FACTORY = asyncio.new_event_loop


def run_salt(ctx: RunContext) -> str:
    """Per-run salt: the run directory and start instant (shared by all workers of the run)."""
    return hashlib.sha256(f"{ctx.run_dir.resolve()}|{ctx.t0_ns}".encode()).hexdigest()[:12]


class _Stream:
    """What one request has received so far (across retries no token has been received, by rule)."""

    __slots__ = ("tokens", "last_ns", "usage", "finish_reason", "done", "headers")

    def __init__(self) -> None:
        self.tokens = 0
        self.last_ns = 0
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.done = False  # [DONE] seen
        self.headers = False  # response headers received (a timeout now is a stall)


class OpenAITarget:
    def __init__(self, spec: TargetSpec, ctx: RunContext):
        prof = load_profile(spec.params, spec.source)
        self.prof: EndpointProfile = prof if prof.model and prof.word_tokens > 0 else prepare(prof)
        self.ctx = ctx
        self.prompts = PromptBuilder(run_salt(ctx) if prof.salt else "", self.prof.word_tokens)
        self._headers = {**auth_headers(self.prof), "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        self._base = self._base_body()
        self._heap: list[tuple[int, int, Request]] = []
        self._seq = 0
        self._inflight: dict[int, Request] = {}  # released, not ended: the terminal event pops it (exactly once)
        self._open = 0  # submitted, not ended
        self._tasks: set[asyncio.Task] = set()
        self._emit: Emit | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._wake: asyncio.Future | None = None
        self._stopping = False
        self._crash: BaseException | None = None

    def _base_body(self) -> dict:
        p = self.prof
        body: dict = {"model": p.model, "stream": True}
        if p.include_usage:
            body["stream_options"] = {"include_usage": True}
        if p.ignore_eos:
            body["ignore_eos"] = True
        return {**body, **p.extra_body}

    def body(self, req: Request) -> bytes:
        n = max(1, req.output_tokens)
        b = dict(self._base)
        b["max_tokens"] = n
        if self.prof.min_tokens:
            b["min_tokens"] = n
        if self.prof.api == "chat":
            b["messages"] = self.prompts.messages(req)
        else:
            b["prompt"] = self.prompts.text(req)
        return orjson.dumps(b)

    # -- scheduling -------------------------------------------------------------------------------------------

    def submit(self, req: Request, at_ns: int) -> None:
        self._open += 1
        if self._loop is not None and not self._stopping and at_ns <= time.monotonic_ns() - self.ctx.t0_ns:
            self._start(req, at_ns)  # due already (closed loop, session follow-up): skip the heap
            return
        heappush(self._heap, (at_ns, self._seq, req))
        self._seq += 1
        self._poke()

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def _start(self, req: Request, at_ns: int) -> None:
        self._inflight[req.req_id] = req
        task = self._loop.create_task(self._request(req, at_ns))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._crash is None:
            self._crash = task.exception()  # e.g. the event log cannot write: stop the run, don't hang
            self._poke()

    async def _sleep(self, ns: int | None) -> None:
        """Sleep `ns` (None: until poked); a submit() or a request's end pokes it early."""
        fut = self._wake = self._loop.create_future()
        handle = None if ns is None else self._loop.call_later(ns / 1e9, self._poke)
        try:
            await fut
        finally:
            self._wake = None
            if handle is not None:
                handle.cancel()

    async def _dispatch(self) -> None:
        heap, t0 = self._heap, self.ctx.t0_ns
        while heap or self._open:
            if self._crash is not None:
                raise self._crash
            if not heap:
                await self._sleep(None)
                continue
            wait = heap[0][0] - (time.monotonic_ns() - t0)
            if wait > SPIN_NS:
                await self._sleep(wait - SPIN_NS)
            elif wait > 0:
                await asyncio.sleep(0)
            else:
                at_ns, _, req = heappop(heap)
                self._start(req, at_ns)

    # -- run --------------------------------------------------------------------------------------------------

    def run(self, emit: Emit) -> None:
        self._emit = emit
        if not self._heap and not self._open:
            return
        try:
            with asyncio.Runner(loop_factory=LOOP_FACTORY) as runner:
                runner.run(self._main())
        except (KeyboardInterrupt, asyncio.CancelledError):
            self._cancel_rest("interrupted")
            raise KeyboardInterrupt from None
        finally:
            self._loop = None

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._session = self._new_session()
        scraper = None
        if self.prof.scrape_interval_s > 0 and self.ctx.worker == 0:
            scraper = self._loop.create_task(scrape_loop(self._session, self.prof, self.ctx))
        try:
            await self._dispatch()
        except asyncio.CancelledError:
            self._stopping = True
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            raise
        finally:
            if scraper is not None:
                scraper.cancel()
                await asyncio.gather(scraper, return_exceptions=True)
            await self._session.close()

    def _new_session(self) -> aiohttp.ClientSession:
        p = self.prof
        timeout = aiohttp.ClientTimeout(total=p.request_timeout_s or None, sock_connect=p.connect_timeout_s,
                                        sock_read=p.read_timeout_s)
        connector = aiohttp.TCPConnector(limit=p.max_connections, limit_per_host=0, ttl_dns_cache=None)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self._headers,
                                     auto_decompress=False, raise_for_status=False)

    def _cancel_rest(self, why: str) -> None:
        """After the loop stopped: CANCEL every request still open, including ones submitted while cancelling."""
        self._stopping = True
        now = time.monotonic_ns() - self.ctx.t0_ns
        for rid in list(self._inflight):
            self._terminal(Event(now, rid, CANCEL, detail=why))
        while self._heap:
            at_ns, _, req = heappop(self._heap)
            self._emit(Event(at_ns, req.req_id, ARRIVE, tokens=req.input_tokens))
            self._inflight[req.req_id] = req
            self._terminal(Event(max(now, at_ns), req.req_id, CANCEL, detail=why))

    def _terminal(self, ev: Event) -> None:
        if self._inflight.pop(ev.req_id, None) is None:
            return  # already ended: never a second terminal event
        self._emit(ev)
        self._open -= 1
        if not self._open:
            self._poke()

    # -- one request ------------------------------------------------------------------------------------------

    async def _request(self, req: Request, at_ns: int) -> None:
        emit, rid = self._emit, req.req_id
        emit(Event(at_ns, rid, ARRIVE, None, req.input_tokens))
        st, notes = _Stream(), []
        try:
            data = self.body(req)
            emit(Event(time.monotonic_ns() - self.ctx.t0_ns, rid, SEND))
            while True:
                fault = await self._attempt(rid, data, st)
                if fault is None or fault[0] not in RETRYABLE or st.tokens or len(notes) >= self.prof.retries:
                    break
                notes.append(f"retry {len(notes) + 1} after {fault[0]}: {fault[1]}")
                st = _Stream()
        except asyncio.CancelledError:
            self._terminal(Event(time.monotonic_ns() - self.ctx.t0_ns, rid, CANCEL, detail="interrupted"))
            return
        except Exception as e:  # a bug in building the request must not end the run
            fault = ("internal", one_line(f"{type(e).__name__}: {e}"))
        self._end(req, st, fault, notes)

    async def _attempt(self, rid: int, data: bytes, st: _Stream) -> tuple[str, str] | None:
        """Send once and read the stream; None on success, else (class, message)."""
        try:
            async with self._session.post(self.prof.endpoint_url, data=data) as resp:
                st.headers = True
                if resp.status != 200:
                    return classify_status(resp.status, await resp.content.read(ERROR_BODY_BYTES))
                await self._read(rid, resp.content, st)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if st.done:
                return None  # everything arrived; only the connection's tail went wrong
            return classify(e, st.headers)
        if not st.done and st.finish_reason is None:
            return "protocol", f"stream ended without [DONE] after {st.tokens} tokens"
        return None

    async def _read(self, rid: int, content: aiohttp.StreamReader, st: _Stream) -> None:
        emit, t0 = self._emit, self.ctx.t0_ns
        sse = SSEParser(self.prof.max_event_bytes)
        chat = self.prof.api == "chat"
        while True:
            chunk = await content.readany()
            now = time.monotonic_ns() - t0
            payloads = sse.feed(chunk) if chunk else sse.close()
            before = st.tokens
            try:
                for payload in payloads:
                    if payload == b"[DONE]":
                        st.done = True
                    elif payload:
                        st.tokens += _tokens_in(orjson.loads(payload), st, chat)
            finally:  # tokens read before a fault in the same read are still measured
                if st.tokens > before:
                    emit(Event(now, rid, CHUNK if before else FIRST_TOKEN, None, st.tokens - before))
                    st.last_ns = now
            if sse.error is not None:
                raise sse.error
            if not chunk:
                return

    def _end(self, req: Request, st: _Stream, fault: tuple[str, str] | None, notes: list[str]) -> None:
        now = time.monotonic_ns() - self.ctx.t0_ns
        rid, usage = req.req_id, st.usage or {}
        if st.tokens:
            self._emit(Event(st.last_ns, rid, LAST_TOKEN, None, st.tokens))
        if fault is not None:
            kind = REJECT if fault[0] == "http_429" else ERROR
            self._terminal(Event(now, rid, kind, detail="; ".join([f"{fault[0]}: {fault[1]}"] + notes)))
            return
        tokens = usage.get("completion_tokens")
        tokens = st.tokens if not isinstance(tokens, int) else tokens
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        parts = []
        if tokens < max(1, req.output_tokens):
            parts.append(f"short_output: got {tokens} of {max(1, req.output_tokens)} tokens")
        if isinstance(usage.get("prompt_tokens"), int):
            parts.append(f"prompt_tokens={usage['prompt_tokens']}")
        self._terminal(Event(now, rid, FINISH, None, tokens, cached if isinstance(cached, int) else None,
                             detail="; ".join(parts + notes) or None))


def _tokens_in(obj: object, st: _Stream, chat: bool) -> int:
    """Tokens in one streamed JSON object: 1 per chunk with text, unless usage counts them (continuous usage)."""
    if not isinstance(obj, dict):
        raise StreamFault("protocol", f"data is not a JSON object: {one_line(repr(obj), 80)}")
    if "error" in obj:
        raise StreamFault("server_error", one_line(orjson.dumps(obj["error"]).decode()))
    usage = obj.get("usage")
    if usage:
        st.usage = usage
    choices = obj.get("choices")
    if not choices:
        return 0
    c = choices[0]
    if chat:
        delta = c.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content")
    else:
        text = c.get("text")
    if c.get("finish_reason"):
        st.finish_reason = c["finish_reason"]
    n = 1 if text else 0
    if usage and isinstance(usage.get("completion_tokens"), int):
        n = max(0, usage["completion_tokens"] - st.tokens)
    return n
