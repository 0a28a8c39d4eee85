"""The HTTP/1.1 client: response framing under any split, keep-alive reuse on real sockets, header safety."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.config import ConfigError
from kvbench.http.conn import Connection, request_head
from kvbench.http.faults import StreamFault
from kvbench.http.pool import Pool

BODY = b'data: {"choices":[{"text":" a"}]}\n\n' * 3 + b"data: [DONE]\n\n"


def chunked(body: bytes, sizes: tuple[int, ...] = (7, 30, 1), ext: bytes = b";ext=1") -> bytes:
    out, i, k = b"", 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        out += b"%x%s\r\n%s\r\n" % (len(body[i : i + n]), ext, body[i : i + n])
        i, k = i + n, k + 1
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


CHUNKED = (
    b"HTTP/1.1 100 Continue\r\n\r\n" + b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)
)


class Recorder:
    """A sink that keeps what it was given."""

    def __init__(self):
        self.status, self.data, self.ends, self.sent, self.done = None, b"", 0, 0, False
        self.reconnects, self.connects = [], []

    def on_connect(self, connect_ns):
        self.connects.append(connect_ns)

    def on_send(self, now_ns):
        self.sent += 1

    def on_head(self, status, now_ns, headers):
        self.status, self.headers = status, headers

    def on_data(self, data, now_ns):
        self.data += data

    def on_end(self, now_ns):
        self.ends += 1

    def on_done(self, now_ns):
        self.done = True

    def on_reconnect(self, why):
        self.reconnects.append(why)


class Wire:
    """The transport side the connection writes to (bytes kept, close/abort noted)."""

    def __init__(self):
        self.written, self.closed = b"", False

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True

    abort = close

    def is_closing(self):
        return self.closed


def feed(response: bytes, cuts: list[int]) -> tuple[Connection, Recorder, asyncio.Future]:
    loop = asyncio.new_event_loop()
    try:
        conn, sink, fut = Connection(), Recorder(), loop.create_future()
        conn.connection_made(Wire())
        conn.start(b"POST / HTTP/1.1\r\n\r\n", sink, fut)
        last = 0
        for c in sorted(set(cuts)) + [len(response)]:
            if c > last:
                conn.data_received(response[last:c])
            last = c
        return conn, sink, fut
    finally:
        loop.close()


def test_chunked_response_with_interim_100_and_trailer():
    conn, sink, fut = feed(CHUNKED, [])
    assert (sink.status, sink.data, sink.ends, sink.sent) == (200, BODY, 1, 1)
    assert fut.done() and fut.exception() is None and conn.keep_alive


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CHUNKED)), max_size=15))
def test_any_split_gives_the_same_body(cuts):
    _, sink, fut = feed(CHUNKED, cuts)
    assert (sink.data, sink.ends) == (BODY, 1) and fut.exception() is None


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
PLAIN = HEAD_200 + chunked(BODY, (len(BODY) // 4, 0x1F), b"")  # no extensions: the whole-chunk fast paths


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(PLAIN)), max_size=15))
def test_any_split_of_plain_chunks_gives_the_same_body(cuts):
    _, sink, fut = feed(PLAIN, cuts + [len(HEAD_200)])
    assert (sink.data, sink.ends) == (BODY, 1) and fut.exception() is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.lists(st.integers(0, 4000), max_size=4))
def test_many_whole_chunks_in_one_read_give_the_same_body(sizes, cuts):
    # a whole streamed response in one read is ~20 chunks taken in one loop; a cut anywhere hands the partial
    # chunk to the state machine and the loop resumes after it
    resp = HEAD_200 + chunked(BODY, tuple(sizes), b"")
    _, sink, fut = feed(resp, [len(HEAD_200)] + [c % len(resp) for c in cuts])
    assert (sink.data, sink.ends) == (BODY, 1) and fut.exception() is None


def test_chunk_sizes_the_loop_does_not_take_go_to_the_state_machine():
    # zero-padded to 10 digits, and with an extension: the same body, read by the general path
    body = b"data: a\n\n"
    for size in (b"0000000009", b"9;x=1"):
        _, sink, fut = feed(HEAD_200 + size + b"\r\n" + body + b"\r\n" + size + b"\r\n" + body + b"\r\n0\r\n\r\n", [])
        assert (sink.data, sink.ends) == (body * 2, 1) and fut.exception() is None


def test_a_whole_chunk_without_its_crlf_is_protocol_alone_or_among_others():
    for resp in (HEAD_200 + b"3\r\nabcXY", HEAD_200 + b"2\r\nab\r\n3\r\nabcXY3\r\ndef\r\n0\r\n\r\n"):
        _, _, fut = feed(resp, [len(HEAD_200)])
        assert fut.exception().cls == "protocol" and "not followed by CRLF" in str(fut.exception())


def test_a_head_repeated_on_a_connection_reads_as_the_first_and_a_changed_one_is_parsed():
    loop = asyncio.new_event_loop()
    try:
        conn = Connection()
        conn.connection_made(Wire())
        close = HEAD_200.replace(b"Content-Type", b"Connection: close\r\nContent-Type")
        length = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\n\r\nbusy"
        seen = []
        for resp in (PLAIN, PLAIN, length, length, close + chunked(BODY)):
            sink, fut = Recorder(), loop.create_future()
            conn.start(b"POST / HTTP/1.1\r\n\r\n", sink, fut)
            conn.data_received(resp)
            seen.append((sink.status, sink.data, sink.headers, conn.keep_alive, fut.exception()))
    finally:
        loop.close()
    assert (
        seen[0]
        == seen[1]
        == (200, BODY, {b"content-type": b"text/event-stream", b"transfer-encoding": b"chunked"}, True, None)
    )
    assert seen[2] == seen[3] == (429, b"busy", {b"content-length": b"4"}, True, None)
    assert seen[4][:2] == (200, BODY) and seen[4][3] is False


def test_content_length_body_and_connection_close():
    resp = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy!"
    conn, sink, fut = feed(resp, [3, 40])
    assert (sink.status, sink.data, sink.ends) == (503, b"busy!", 1)
    assert fut.exception() is None and not conn.keep_alive


def test_header_values_reach_the_sink_with_their_case_and_framing_headers_match_any_case():
    resp = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /V1/Other?Q=A\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n"
    )
    conn, sink, fut = feed(resp, [])
    assert sink.status == 307 and sink.headers[b"location"] == b"/V1/Other?Q=A"
    assert fut.exception() is None and not conn.keep_alive
    _, sink, _ = feed(HEAD_200.replace(b"chunked", b"Chunked") + chunked(BODY), [])
    assert sink.data == BODY


def test_body_until_close_ends_at_connection_lost():
    conn, sink, fut = feed(b"HTTP/1.0 200 OK\r\n\r\ndata: x\n\n", [])
    assert not fut.done()
    conn.connection_lost(None)
    assert (sink.data, sink.ends, fut.exception()) == (b"data: x\n\n", 1, None)


def test_close_mid_chunk_is_a_reset_and_bad_framing_is_protocol():
    conn, sink, fut = feed(CHUNKED[:150], [])
    conn.connection_lost(ConnectionResetError("peer"))
    err = fut.exception()
    assert isinstance(err, StreamFault) and err.cls == "reset" and "body bytes" in str(err)
    _, _, fut = feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", [])
    assert fut.exception().cls == "protocol" and "bad chunk size" in str(fut.exception())
    _, _, fut = feed(b"SPAM 200\r\n\r\n", [])
    assert fut.exception().cls == "protocol" and "status line" in str(fut.exception())


def test_request_head_and_header_injection():
    head = request_head("http://h:81/v1/completions?x=1", {"Authorization": "Bearer k", "content-type": "a/b"})
    assert head == (
        b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: h:81\r\ncontent-type: a/b\r\nAuthorization: Bearer k\r\n"
    )
    with pytest.raises(ConfigError, match="single-line"):
        request_head("http://h/v1", {"X-A": "v\r\nX-Evil: 1"})


async def _serve_and_request(close: bool, n: int) -> tuple[int, list[bytes], list[int]]:
    """A raw server on 127.0.0.1 answering each request with a 3-byte body; returns connections used, bodies,
    and how many connects each request reported (with a positive duration)."""
    conns = []

    async def handle(reader, writer):
        conns.append(writer)
        while await reader.readuntil(b"\r\n\r\n"):
            extra = b"Connection: close\r\n" if close else b""
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + extra + b"\r\nabc")
            await writer.drain()
            if close:
                writer.close()
                return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool, bodies, connects = Pool(f"http://127.0.0.1:{port}/v1", 0, 5.0), [], []
    for _ in range(n):
        sink = Recorder()
        await pool.request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", sink)
        bodies.append(sink.data)
        connects.append(sum(1 for ns in sink.connects if ns > 0))
    pool.close()
    server.close()
    return len(conns), bodies, connects


def test_keep_alive_reuses_one_connection_and_close_does_not():
    # 4 sequential requests: one connection when the server keeps it alive, 4 when it says close; each request
    # that opened one was told how long connecting took
    assert asyncio.run(_serve_and_request(False, 4)) == (1, [b"abc"] * 4, [1, 0, 0, 0])
    assert asyncio.run(_serve_and_request(True, 4)) == (4, [b"abc"] * 4, [1, 1, 1, 1])


async def _stale_then_fresh() -> tuple[int, list[bytes], list[str]]:
    """The server answers the first request of a connection and closes on the second without answering (as
    when it closed an idle keep-alive connection the client then reused)."""
    conns = []

    async def handle(reader, writer):
        conns.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = Pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", 0, 5.0)
    sinks = [Recorder(), Recorder()]
    for sink in sinks:
        await pool.request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", sink)
    pool.close()
    server.close()
    return len(conns), [s.data for s in sinks], sinks[1].reconnects


def test_a_stale_reused_connection_is_replaced_once_and_reported():
    n_conns, bodies, reconnects = asyncio.run(_stale_then_fresh())
    assert (n_conns, bodies) == (2, [b"ok", b"ok"])
    assert len(reconnects) == 1 and "connection closed before the response" in reconnects[0]


def test_good_chunks_before_a_framing_fault_in_the_same_read_are_delivered():
    # one read: the head, two whole chunks, then a chunk-size line that is not hex: the sink gets both chunks'
    # bytes first (their tokens are measured), then the request fails with a protocol fault
    good = b"data: a\n\n", b"data: b\n\n"
    read = HEAD_200 + b"".join(b"%x\r\n%s\r\n" % (len(g), g) for g in good) + b"zz\r\nxx\r\n"
    conn, sink, fut = feed(read, [])
    assert sink.data == b"".join(good) and sink.ends == 0
    assert isinstance(fut.exception(), StreamFault) and "bad chunk size" in str(fut.exception())
    assert not conn.keep_alive
