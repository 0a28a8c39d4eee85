"""A minimal HTTP/1.1 keep-alive client on asyncio protocols, built for streaming measurement.

Why not aiohttp's client here: it hands every body read to the request's task through a StreamReader and a
future, which costs ~2x the CPU per streamed token of parsing the bytes right inside `data_received` (measured
in tests/bench/bench_http.py), and it stamps time only after that task switch. This client takes the arrival
time at the top of `data_received`, de-chunks in place and passes each read's body bytes to a sink
synchronously. It speaks exactly what OpenAI-compatible servers need: one request per connection at a time,
Content-Length request bodies, chunked / Content-Length / until-close responses, keep-alive reuse (the pool of
connections to one origin is kvbench/http/pool.py), TLS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

from kvbench.config import ConfigError
from kvbench.http.chunks import chunk_size, whole_chunk, whole_chunks
from kvbench.http.faults import StreamFault

MAX_HEAD_BYTES = 64 << 10  # response status line + headers
MAX_LINE_BYTES = 4096  # a chunk-size or trailer line

_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _EOF, _DONE = range(8)


class Sink(Protocol):
    """Receives one response. Times are time.monotonic_ns() taken when the read returned the bytes."""

    def on_connect(self, connect_ns: int) -> None: ...  # a new connection was opened for it, taking connect_ns

    def on_send(self, now_ns: int) -> None: ...  # just before the request bytes are written

    # names lowercased; a head repeated on a connection gives the same dict again: read it, do not change it
    def on_head(self, status: int, now_ns: int, headers: dict[bytes, bytes]) -> None: ...

    def on_data(self, data: bytes, now_ns: int) -> None: ...  # the body bytes of one read (de-chunked)

    def on_end(self, now_ns: int) -> None: ...  # the body is complete (may still raise: e.g. a bad last event)

    def on_done(self, now_ns: int) -> None: ...  # after the connection went back to the pool; must not raise

    def on_reconnect(self, why: str) -> None: ...  # the request is being resent on a fresh connection (stale one)


class StaleConnection(StreamFault):
    """A reused keep-alive connection closed before any byte of the response: the server had closed it (its
    idle timeout, or a server such as llama-server 0.3.36 that closes after streaming while saying keep-alive)
    and never read the request. Resent once on a new connection; the terminal event's detail says so."""


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; `start` sends a request and resolves `fut` when its response ends."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made sets it first
        self.sink: Sink | None = None
        self.fut: asyncio.Future | None = None
        self.failed: Callable[[Sink], None] | None = None  # told at once when the response fails (see start)
        self.state = _DONE
        self.buf = b""
        self.remaining = 0
        self.keep_alive = True
        self.closed = False
        self.received = 0  # body bytes of the current response
        self.idle: list[Connection] | None = None  # its pool's idle list: a clean end puts it back at once
        self.served = 0  # responses completed on this connection
        # the previous response's head bytes and what they gave: status, headers, keep-alive, state, remaining
        self.last_head: tuple[bytes, int, dict[bytes, bytes], bool, int, int] | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def start(
        self, payload: bytes, sink: Sink, fut: asyncio.Future, failed: Callable[[Sink], None] | None = None
    ) -> None:
        """Send `payload`; `fut` resolves when the response ends. `failed(sink)`, if given, is also called right
        when it fails (not on a clean end): a caller that awaits nothing learns it without a callback on `fut`."""
        self.sink, self.fut, self.failed, self.state, self.buf, self.received = sink, fut, failed, _HEAD, b"", 0
        sink.on_send(time.monotonic_ns())
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self.sink is None:  # bytes nobody asked for: the connection is out of step, never reuse it
            self.keep_alive = False
            self.transport.close()
            return
        sink = self.sink
        try:
            fault = None
            body = whole_chunk(data) if self.state == _SIZE and not self.buf else None
            if body is None:
                body, fault = self._feed(self.buf + data if self.buf else data, now)
            if body:
                self.received += len(body)
                sink.on_data(body, now)
            if fault is not None:
                raise fault  # after the read's good bytes were measured
            if self.state != _DONE:
                return
            sink.on_end(now)
        except Exception as e:  # framing errors, and whatever the sink raised (bad SSE, bad JSON)
            self.keep_alive = False
            self._finish(e)
            self.transport.abort()
            return
        self._finish(None)  # idle again before on_done, so a request released by on_done can reuse it now
        sink.on_done(now)

    def abandon(self) -> None:
        """Drop the request in progress (cancelled, timed out): nothing more reaches its sink, and the
        connection, now out of step with the server, is closed."""
        self.sink = self.fut = self.failed = None
        self.keep_alive = False
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.sink is None:
            return
        if self.state == _EOF:  # a body delimited by the close: this is its end
            sink, now = self.sink, time.monotonic_ns()
            try:
                sink.on_end(now)
            except Exception as e:
                self._finish(e)
                return
            self._finish(None)
            sink.on_done(now)
            return
        where = "before the response" if self.state == _HEAD else f"after {self.received} body bytes"
        why = f" ({type(exc).__name__}: {exc})" if exc else ""
        stale = self.state == _HEAD and not self.buf and self.served > 0
        self._finish((StaleConnection if stale else StreamFault)("reset", f"connection closed {where}{why}"))

    def _finish(self, error: Exception | None) -> None:
        fut, sink, failed = self.fut, self.sink, self.failed
        self.sink = self.fut = self.failed = None
        if fut is not None and not fut.done():
            fut.set_exception(error) if error is not None else fut.set_result(None)
        if error is not None and failed is not None and sink is not None:
            failed(sink)
        if error is None:
            self.served += 1
        if error is None and self.idle is not None:
            if self.keep_alive and not self.closed:
                self.idle.append(self)
            else:
                self.transport.close()

    def _feed(self, buf: bytes, now: int) -> tuple[bytes, StreamFault | None]:
        """Advance the response state machine over `buf`; returns the body bytes found in it and the framing
        fault that stopped it, if any (the bytes before a fault still count). Positions, not slices, walk the
        buffer (no copies)."""
        out: list[bytes] = []
        try:
            self._walk(buf, out, now)
        except StreamFault as fault:
            return b"".join(out), fault
        return out[0] if len(out) == 1 else b"".join(out), None

    def _walk(self, buf: bytes, out: list[bytes], now: int) -> None:
        pos, n = 0, len(buf)
        while pos < n and self.state != _DONE:
            if self.state == _HEAD:
                rest = self._head(buf[pos:], now)
                if rest is None:
                    break
                buf, pos, n = rest, 0, len(rest)
                continue
            if self.state == _SIZE:  # several whole chunks in one read (a client that fell behind)
                end = whole_chunks(buf, pos, out)
                if end > pos:
                    pos = end
                    continue
            step = self._body_step(buf, pos, n, out)
            if step < 0:
                break  # the element at `pos` is incomplete: it stays buffered
            pos = step
        rest = buf[pos:] if pos else buf
        self.buf = rest if self.state != _DONE else b""
        if self.state == _DONE and rest:
            self.keep_alive = False  # more bytes than the response: do not trust this connection again

    def _body_step(self, buf: bytes, pos: int, n: int, out: list[bytes]) -> int:
        """One step of the body from `pos`: the new position, or -1 when more bytes are needed."""
        st = self.state
        if st == _SIZE:
            i = self._eol(buf, pos)
            if i < 0:
                return -1
            size, start = chunk_size(buf[pos:i]), i + 2
            if not size:
                self.state = _TRAILER
                return start
            if start + size + 2 <= n:  # the common case: the whole chunk and its CRLF are here
                if buf[start + size : start + size + 2] != b"\r\n":
                    raise StreamFault("protocol", "chunk not followed by CRLF")
                out.append(buf[start : start + size])
                return start + size + 2
            self.state, self.remaining = _DATA, size
            return start
        if st == _DATA or st == _LENGTH:
            end = min(n, pos + self.remaining)
            out.append(buf[pos:end])
            self.remaining -= end - pos
            if not self.remaining:
                self.state = _CRLF if st == _DATA else _DONE
            return end
        if st == _CRLF:
            if n - pos < 2:
                return -1
            if buf[pos : pos + 2] != b"\r\n":
                raise StreamFault("protocol", "chunk not followed by CRLF")
            self.state = _SIZE
            return pos + 2
        if st == _TRAILER:
            i = self._eol(buf, pos)
            if i < 0:
                return -1
            if i == pos:
                self.state = _DONE
            return i + 2
        out.append(buf[pos:])  # _EOF: everything until the close
        return n

    @staticmethod
    def _eol(buf: bytes, pos: int) -> int:
        """Index of the CRLF ending the line at `pos`, or -1 while it has not arrived (bounded)."""
        i = buf.find(b"\r\n", pos)
        if i < 0 and len(buf) - pos > MAX_LINE_BYTES:
            raise StreamFault("protocol", "chunk-size or trailer line too long")
        return i

    def _head(self, buf: bytes, now: int) -> bytes | None:
        """Status line and headers; returns what follows them (None: incomplete). A head byte for byte the
        same as this connection's previous one (a server's heads repeat but for a Date header) is not parsed
        again."""
        i = buf.find(b"\r\n\r\n")
        if i < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise StreamFault("protocol", "response headers larger than 64 KiB")
            return None
        head = buf[:i]
        if self.last_head is not None and self.last_head[0] == head:
            _, status, headers, self.keep_alive, self.state, self.remaining = self.last_head
        else:
            status, headers = _parse_head(head)
            if 100 <= status < 200:
                return buf[i + 4 :]  # an interim response (100 Continue): the real one follows
            self._frame(headers, head.startswith(b"HTTP/1.1 "))
            self.last_head = head, status, headers, self.keep_alive, self.state, self.remaining
        sink = self.sink
        assert sink is not None  # a response is read only for a request in progress
        sink.on_head(status, now, headers)
        return buf[i + 4 :]

    def _frame(self, headers: dict[bytes, bytes], http11: bool) -> None:
        """Keep-alive and the body's framing (chunked, Content-Length or until the close) from the headers."""
        conn = headers.get(b"connection", b"").lower()
        self.keep_alive = b"close" not in conn and (http11 or b"keep-alive" in conn)
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.state = _SIZE
        elif b"content-length" in headers:
            try:
                self.remaining = int(headers[b"content-length"])
            except ValueError:
                raise StreamFault("protocol", "bad Content-Length") from None
            self.state = _LENGTH if self.remaining else _DONE
        else:
            self.state, self.keep_alive = _EOF, False


def _parse_head(head: bytes) -> tuple[int, dict[bytes, bytes]]:
    """The status and the headers (names lowercased; values keep their case: a Location's path needs it)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise StreamFault("protocol", f"bad HTTP status line {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def request_head(url: str, headers: dict[str, str]) -> bytes:
    """`POST path HTTP/1.1`, Host and `headers`, up to (not including) Content-Length and the blank line."""
    u = urlsplit(url)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    lines = [f"POST {path} HTTP/1.1", f"Host: {u.netloc.rpartition('@')[2]}"]
    merged = {"content-type": ("Content-Type", "application/json")}
    for name, value in headers.items():
        if any(c in f"{name}{value}" for c in "\r\n") or not name or ":" in name:
            raise ConfigError(f"header {name!r}: names and values must be single-line (and names without ':')")
        merged[name.lower()] = (name, value)
    lines += [f"{name}: {value}" for name, value in merged.values()]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")
