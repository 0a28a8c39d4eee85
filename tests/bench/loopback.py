"""A loopback OpenAI-compatible mock server in its own process, for the HTTP benchmarks (not collected by pytest).

    with ServerProcess(ttft_ms=0, itl_ms=0) as srv: ... srv.url ... srv.stats()

Raw asyncio protocols on uvloop. `/v1/completions` and `/v1/chat/completions` stream vLLM-shaped chunks (chat: a
first chunk carrying `role`, then `delta.content` chunks, a finish chunk, a usage chunk, `[DONE]`). Without a TTFT
the whole response is one write (with `split`: one write per token, each on the next loop iteration, so a
client reads a token or a few at a time); with a TTFT and no ITL a timer thread writes each whole response straight to its
socket at its exact deadline (it sleeps, timer slack 1 us, until 200 us before it, then spins), so neither the
loop's ms-grained timers nor spinning on the loop delay other connections; with an ITL, one write per token.
`GET /stats` returns what the server saw since the last call and resets it: the wall-clock time of the first
request (`first_unix`), completed responses (`done`), the monotonic span from the first request's arrival to the
last response's write (`span_ns`), the timer's lateness p50/p90, and the monotonic times of the first request's
arrival (`first_ns`) and of each response's last write (`ends_ns`: CLOCK_MONOTONIC is one clock for every
process, so two servers' counts can be taken over the same window).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_COMMON = b'"id":"cmpl-bench","created":1700000000,"model":"bench"'
TOKEN = b'data: {"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"bench","choices":[{"index":0,"text":" w","logprobs":null,"finish_reason":null}]}\n\n'  # noqa: E501
STOP = b'data: {"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"bench","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}\n\n'  # noqa: E501
CHAT_ROLE = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'  # noqa: E501
CHAT_TOKEN = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":" w"},"logprobs":null,"finish_reason":null}]}\n\n'  # noqa: E501
CHAT_STOP = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length"}]}\n\n'  # noqa: E501
USAGE = (
    b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: [DONE]\n\n'
)


def chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def response_parts(chat: bool, prompt_words: int, n: int) -> list[bytes]:
    """One chunked HTTP response as writes: head (+ chat role chunk) + first token, each further token, the tail."""
    first = HEAD + (chunked(CHAT_ROLE) if chat else b"") + chunked(CHAT_TOKEN if chat else TOKEN)
    tail = chunked((CHAT_STOP if chat else STOP) + USAGE % (prompt_words, n)) + b"0\r\n\r\n"
    return [first] + [chunked(CHAT_TOKEN if chat else TOKEN)] * (n - 1) + [tail]


class _Stats:
    """What the server saw since the last GET /stats (one per server process)."""

    def __init__(self) -> None:
        self.first_unix, self.first_ns, self.last_ns, self.done = 0.0, 0, 0, 0
        self.late_ns: list[int] = []
        self.ends_ns: list[int] = []  # monotonic time of each response's last write (one clock for all processes)

    def arrived(self, now_ns: int) -> None:
        if not self.first_ns:
            self.first_unix, self.first_ns = time.time(), now_ns

    def written(self) -> None:
        self.done += 1
        self.last_ns = time.monotonic_ns()
        self.ends_ns.append(self.last_ns)

    def take(self) -> bytes:
        late = sorted(self.late_ns) or [0]
        out = {
            "first_unix": self.first_unix,
            "done": self.done,
            "span_ns": max(0, self.last_ns - self.first_ns),
            "late_p50_ns": late[len(late) // 2],
            "late_p90_ns": late[len(late) * 9 // 10],
            "first_ns": self.first_ns,
            "ends_ns": self.ends_ns,
        }
        self.__init__()  # type: ignore[misc]
        return json.dumps(out).encode()


class _Timer(threading.Thread):
    """Writes each first-token response at its exact deadline, from its own thread, straight to the socket.
    Only this thread writes to those sockets, the loop only reads them."""

    SPIN_NS = 200_000

    def __init__(self, loop, stats: _Stats):
        super().__init__(daemon=True)
        self.loop, self.stats, self.cond, self.heap, self.seq = loop, stats, threading.Condition(), [], 0

    def add(self, deadline_ns: int, transport, data: bytes) -> None:
        with self.cond:
            heapq.heappush(self.heap, (deadline_ns, self.seq, transport, data))
            self.seq += 1
            self.cond.notify()

    def run(self) -> None:
        ctypes.CDLL(None).prctl(29, 1000)  # PR_SET_TIMERSLACK: 1 us instead of 50 us for this thread's waits
        while True:
            with self.cond:
                while True:
                    wait = self.heap[0][0] - time.monotonic_ns() - self.SPIN_NS if self.heap else None
                    if wait is not None and wait <= 0:
                        deadline, _, transport, data = heapq.heappop(self.heap)
                        break
                    self.cond.wait(None if wait is None else wait / 1e9)
            now = time.monotonic_ns()
            while now < deadline:
                now = time.monotonic_ns()
            self._write(transport, data)
            self.stats.late_ns.append(now - deadline)

    def _write(self, transport, data: bytes) -> None:
        if transport.is_closing():
            return
        try:
            n = os.write(transport.get_extra_info("socket").fileno(), data)
        except BlockingIOError:
            n = 0
        except OSError:
            return
        if n < len(data):  # the socket buffer was full (never with these small responses): let the loop finish
            self.loop.call_soon_threadsafe(transport.write, data[n:])
        self.stats.written()


class _Server(asyncio.Protocol):
    ttft_s = 0.0
    itl_s = 0.0
    split = False
    stats = _Stats()
    timer: _Timer | None = None  # with a TTFT and no ITL: writes each whole response at its exact deadline

    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        now = time.monotonic_ns()  # the deadline counts from the arrival of the request's bytes
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + n], self.buf[end + 4 + n :]
            self._handle(head, body, now)

    def _handle(self, head: bytes, body: bytes, now: int) -> None:
        if head.startswith(b"get /stats"):
            out = _Server.stats.take()
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
            return
        _Server.stats.arrived(now)
        req = json.loads(body)
        chat = head.split(b" ", 2)[1].endswith(b"/chat/completions")
        prompt = req["messages"][0]["content"] if chat else str(req.get("prompt", ""))
        parts = response_parts(chat, len(prompt.split()), req["max_tokens"])
        if _Server.timer is not None:
            _Server.timer.add(now + int(_Server.ttft_s * 1e9), self.t, b"".join(parts))
        elif _Server.split:
            self._paced(parts, 0)
        elif not _Server.itl_s:
            self.t.write(b"".join(parts))
            _Server.stats.written()
        else:  # one write per token
            asyncio.get_running_loop().call_later(_Server.ttft_s, self._paced, parts, 0)

    def _paced(self, parts: list[bytes], k: int) -> None:
        """One write per token, each scheduled after the previous one (in order by construction)."""
        if self.t.is_closing():
            return
        self.t.write(parts[k])
        if k + 1 < len(parts) and _Server.split:
            asyncio.get_running_loop().call_soon(self._paced, parts, k + 1)
        elif k + 1 < len(parts):
            asyncio.get_running_loop().call_later(_Server.itl_s, self._paced, parts, k + 1)
        else:
            _Server.stats.written()


def serve(port: int, ttft_ms: float, itl_ms: float, split: bool) -> None:
    import uvloop

    _Server.ttft_s, _Server.itl_s, _Server.split = ttft_ms / 1e3, itl_ms / 1e3, split

    async def main():
        if ttft_ms and not itl_ms:
            _Server.timer = _Timer(asyncio.get_running_loop(), _Server.stats)
            _Server.timer.start()
        srv = await asyncio.get_running_loop().create_server(_Server, "127.0.0.1", port, backlog=1024)
        print(srv.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


class ServerProcess:
    """The mock server in a child process on a free port; `stats()` is its GET /stats."""

    def __init__(self, ttft_ms: float = 0.0, itl_ms: float = 0.0, split: bool = False):
        argv = [sys.executable, __file__, str(ttft_ms), str(itl_ms), "split" if split else "whole"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats").read())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


if __name__ == "__main__":
    serve(0, float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "split")
