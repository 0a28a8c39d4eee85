"""One streamed response: HTTP body bytes -> SSE events -> token events, and the request's terminal event."""

from __future__ import annotations

import re

import orjson

from kvbench.http.faults import StreamFault, one_line
from kvbench.http.sse import SSEParser
from kvbench.records import CHUNK, ERROR, FINISH, FIRST_TOKEN, REJECT, SEND, Emit, Event, Request

ERROR_BODY_BYTES = 4096  # of a non-200 response body, kept for the detail
# ASCII string content that needs no JSON escape and cannot end the string
_PLAIN = re.compile(rb'[^"\\\x00-\x1f\x80-\xff]*').fullmatch


class Response:
    """The sink of one attempt (see conn.Sink). One read carrying k tokens is one event with tokens = k, stamped
    with the time the read returned; the watchdog reads `io_ns` and sets `timed_out` before cancelling."""

    __slots__ = (
        "emit",
        "rid",
        "t0_ns",
        "chat",
        "sse",
        "status",
        "err_body",
        "tokens",
        "last_ns",
        "usage",
        "finish_reason",
        "done",
        "headers",
        "reply_headers",
        "start_ns",
        "io_ns",
        "timed_out",
        "send_event",
        "end_ns",
        "ended",
        "done_cb",
        "notes",
        "tpl",
        "event_tpl",
        "fast",
        "hint",
        "emit_chunk",
        "connect_ns",
    )

    def __init__(
        self,
        emit: Emit,
        rid: int,
        t0_ns: int,
        chat: bool,
        max_event_bytes: int,
        now: int,
        send_event: bool = True,
        done_cb=None,
        notes: list[str] | None = None,
        emit_chunk=None,
        hint: tuple[bytes, bytes, int, int] | None = None,
    ):
        self.emit, self.rid, self.t0_ns, self.chat, self.send_event = emit, rid, t0_ns, chat, send_event
        # CHUNK events as (t_ns, req_id, tokens), straight into the log (EventLog.emit_chunk); else through emit
        self.emit_chunk = emit_chunk or (
            lambda c: emit((c[0], c[1], CHUNK, None, c[2], None, None, None, None))  # type: ignore[arg-type]
        )
        self.done_cb, self.notes = done_cb, notes or []  # done_cb(resp): the target's synchronous completion
        self.sse = SSEParser(max_event_bytes)
        self.status = 0
        self.err_body = b""
        self.tokens = 0
        self.last_ns = 0
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.done = False  # [DONE] seen
        self.headers = False  # response headers received (a silence now is a stall, not a timeout)
        self.reply_headers: dict[bytes, bytes] = {}  # of a non-200 response (Location, Retry-After)
        self.start_ns = -1  # t_ns of the send; -1 until then (connecting, or waiting for a pooled connection)
        self.io_ns = now  # t_ns of the send, then of the last bytes received
        self.timed_out: tuple[str, str] | None = None
        self.end_ns = 0  # t_ns when the last bytes arrived
        self.ended = False  # the terminal event was emitted from on_done
        self.tpl: tuple[bytes, bytes, int, int] | None = None  # bytes around a plain chunk's text, their lengths
        self.event_tpl: tuple[bytes, bytes, int, int] | None = None  # tpl as one whole SSE event
        self.fast: tuple[bytes, bytes, int, int] | None = None  # event_tpl while the parser is idle, else None
        # a tpl learnt by an earlier response of the run, tried on the chunks met before this one learns its own
        self.hint = hint
        self.connect_ns = -1  # time spent opening a new connection for this attempt; -1: a kept-alive one

    def on_connect(self, connect_ns: int) -> None:
        self.connect_ns = connect_ns

    def on_send(self, now_ns: int) -> None:
        """The request bytes are being written (after any connect): SEND, on the first attempt only. Its detail
        `connect_ns=N` says a new connection was opened first, taking N ns: that time is in SEND - ARRIVE (client
        lag) and so in TTFT, reported rather than hidden there."""
        self.start_ns = self.io_ns = now_ns - self.t0_ns
        if self.send_event:
            self.send_event = False
            connect = None if self.connect_ns < 0 else f"connect_ns={self.connect_ns}"
            self.emit((self.start_ns, self.rid, SEND, None, None, None, None, None, connect))  # type: ignore[arg-type]

    def on_reconnect(self, why: str) -> None:
        self.notes.append(f"reconnected after a stale keep-alive connection ({why})")

    def on_head(self, status: int, now_ns: int, headers: dict[bytes, bytes]) -> None:
        self.status, self.headers, self.io_ns = status, True, now_ns - self.t0_ns
        if status != 200:
            self.reply_headers = headers

    def on_data(self, data: bytes, now_ns: int) -> None:
        now = self.io_ns = now_ns - self.t0_ns
        fast = self.fast
        if fast is not None and _fits(data, fast):  # a streamed token's usual read: one whole learnt chunk
            self.tokens += 1
            self.emit_chunk((now, self.rid, 1))
            self.last_ns = now
            return
        if self.status != 200:
            self.err_body += data[: ERROR_BODY_BYTES - len(self.err_body)]
            return
        before = self.tokens
        try:
            self._read(data)
        finally:  # tokens read before a fault in the same read are still measured
            if self.tokens > before:
                self._measured(now, before)

    def on_end(self, now_ns: int) -> None:
        if self.status == 200:
            before = self.tokens
            try:
                self._take(self.sse.close())
            finally:
                if self.tokens > before:
                    self._measured(now_ns - self.t0_ns, before)

    def on_done(self, now_ns: int) -> None:
        self.end_ns = now_ns - self.t0_ns
        if self.done_cb is not None:
            self.done_cb(self)

    def complete(self) -> bool:
        """A clean, successful stream: HTTP 200 and [DONE] or a finish_reason."""
        return self.status == 200 and (self.done or self.finish_reason is not None)

    def _read(self, data: bytes) -> None:
        """Count the tokens in one read of a 200 response's body."""
        pos = 0
        while self.tpl is None and self.sse.idle():
            # No shape learnt yet (a response's first read): parse one whole event at a time, so that once a
            # chunk teaches the shape, the rest of this read (a whole response: ~20 events) is counted by the
            # fast path below rather than parsed. Any split of the bytes is the same to the parser.
            end = data.find(b"\n\n", pos) + 2
            if not pos + 1 < end < len(data):
                break
            self._take(self.sse.feed(data[pos:end]))
            pos = end
        if pos:
            data = data[pos:]
        fast = self.fast
        if fast is not None:  # whole learnt chunks, counted without the parser
            counted, end = _plain_prefix(data, fast)
            if counted:
                self.tokens += counted
                if end == len(data):
                    return
                data = data[end:]  # the rest (a finish or usage chunk, say) starts at an event boundary
        self._take(self.sse.feed(data))

    def _measured(self, now: int, before: int) -> None:
        """The tokens counted since `before` arrived in the read at `now`: one event."""
        if before:
            self.emit_chunk((now, self.rid, self.tokens - before))
        else:  # a plain 9-tuple in Event's field order: the replayer and the log accept it, and it is cheaper
            self.emit((now, self.rid, FIRST_TOKEN, None, self.tokens, None, None, None, None))  # type: ignore[arg-type]
        self.last_ns = now

    def _take(self, payloads: list[bytes]) -> None:
        """Count `payloads` (the caller emits the read's tokens, also when this raises)."""
        for payload in payloads:
            if payload == b"[DONE]":
                self.done = True
            elif self.tpl is not None and _fits(payload, self.tpl):
                self.tokens += 1
            elif self.tpl is None and self.hint is not None and _fits(payload, self.hint):
                self._adopt(self.hint)  # the same shape as an earlier response's chunks: counts 1, not parsed
                self.tokens += 1
            elif payload:
                self.tokens += self._tokens_in(orjson.loads(payload), payload)
        if self.sse.error is not None:
            raise self.sse.error
        # the fast path may take the next read only when it is a whole event on its own: nothing half-read before it
        self.fast = self.event_tpl if self.sse.idle() else None

    def _adopt(self, tpl: tuple[bytes, bytes, int, int]) -> None:
        pre, suf, start, tail = self.tpl = tpl
        self.event_tpl = (b"data: " + pre, suf + b"\n\n", start + 6, tail + 2)

    def _learn(self, payload: bytes, key: bytes, text: object) -> None:
        """Remember the bytes around `text` in a parsed chunk that counted exactly 1 (no usage, no finish
        reason), when its key occurs once and the text is written there unescaped."""
        enc = text.encode() if isinstance(text, str) else b""
        if _PLAIN(enc) is None or payload.count(key) != 1 or b"\n" in payload or b"\r" in payload:
            return
        i = payload.find(key) + len(key)
        j = payload.find(b'"', i)
        if j > i and payload[i:j].strip() == b":" and payload[j + 1 : j + 2 + len(enc)] == enc + b'"':
            suf = payload[j + 1 + len(enc) :]
            self._adopt((payload[: j + 1], suf, j + 1, len(suf)))

    def _tokens_in(self, obj: object, payload: bytes = b"") -> int:
        """1 per chunk with text, unless the chunk's usage counts them (vLLM continuous usage stats)."""
        if not isinstance(obj, dict):
            raise StreamFault("protocol", f"data is not a JSON object: {one_line(repr(obj), 80)}")
        if "error" in obj:
            raise StreamFault("server_error", one_line(orjson.dumps(obj["error"]).decode()))
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        choices = obj.get("choices")
        if not choices:
            return 0
        c = choices[0]
        if self.chat:
            delta = c.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content")
        else:
            text = c.get("text")
        if c.get("finish_reason"):
            self.finish_reason = c["finish_reason"]
        if usage and isinstance(usage.get("completion_tokens"), int):
            return max(0, usage["completion_tokens"] - self.tokens)
        if text and not usage and not c.get("finish_reason") and payload:
            self._learn(
                payload,
                b'"text"' if not self.chat else b'"content"' if delta.get("content") else b'"reasoning_content"',
                text,
            )
        return 1 if text else 0


def _fits(data: bytes, shape: tuple[bytes, bytes, int, int]) -> bool:
    """`data` is the learnt plain token chunk (shape = Response.tpl, or .fast: the same as one SSE event) with
    other non-empty text: the same bytes before and after the text's string, and between them ASCII with no
    quote, backslash or control byte, so it cannot end that string or add anything: the same JSON with another
    text. It counts 1 without parsing."""
    pre, suf, start, tail = shape
    end = len(data) - tail
    return end > start and data.startswith(pre) and data.endswith(suf) and _PLAIN(data, start, end) is not None


def _plain_prefix(data: bytes, fast: tuple[bytes, bytes, int, int]) -> tuple[int, int]:
    """How many whole `data: <learnt plain chunk>\n\n` events `data` starts with, and where they end; the rest
    is parsed. Split at every `suffix + prefix` (one C call for the run, not a step an event): each piece but
    the last is the text of an event that ends with the suffix and is followed by another event's prefix, so the
    leading pieces that are plain and non-empty are learnt events exactly. The next piece is one more when it
    starts with a plain text and the suffix (a plain text has no quote: the first one after it is the suffix's),
    an event followed by something else."""
    if _fits(data, fast):
        return 1, len(data)
    pre, suf, start, tail = fast
    if not data.startswith(pre):
        return 0, 0
    texts = data[start:].split(suf + pre)
    n = len(texts) - 1
    if not all(texts[:n]) or _PLAIN(b"".join(texts[:n])) is None:  # an empty or escaped text: those before it
        n = next(i for i, text in enumerate(texts) if not text or _PLAIN(text) is None)
    end = n * (start + tail) + sum(map(len, texts[:n]))
    j = texts[n].find(suf)
    if j > 0 and _PLAIN(texts[n], 0, j) is not None:
        return n + 1, end + start + j + tail
    return n, end


def terminal(resp: Response, req: Request, fault: tuple[str, str] | None, notes: list[str], now: int) -> Event:
    """FINISH (tokens = usage's completion tokens, else counted; detail: short_output, usage_mismatch,
    prompt_tokens=N, retries) or ERROR / REJECT (HTTP 429) with detail "<class>: <message>[; retry notes]".
    usage_mismatch: the usage's count differs from the chunks with text that were streamed (a server that
    over- or under-claims; also a server that streams several tokens a chunk, which usage then counts right)."""
    if fault is not None:
        kind = REJECT if fault[0] == "http_429" else ERROR
        return Event(now, req.req_id, kind, detail="; ".join([f"{fault[0]}: {fault[1]}"] + notes))
    usage = resp.usage or {}
    claimed = usage.get("completion_tokens")
    tokens = claimed if isinstance(claimed, int) else resp.tokens
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    asked = max(1, req.output_tokens)
    parts = [f"short_output: got {tokens} of {asked} tokens"] if tokens < asked else []
    if tokens != resp.tokens:
        parts.append(f"usage_mismatch: usage says {tokens} completion tokens, {resp.tokens} streamed")
    if isinstance(usage.get("prompt_tokens"), int):
        parts.append(f"prompt_tokens={usage['prompt_tokens']}")
    return Event(
        now,
        req.req_id,
        FINISH,
        None,
        tokens,
        cached if isinstance(cached, int) else None,
        detail="; ".join(parts + notes) or None,
    )
