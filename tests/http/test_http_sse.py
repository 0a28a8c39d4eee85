"""The incremental SSE parser: events are the same however the bytes are split, CRLF/CR/LF, comments, limits."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.http.sse import SSEError, SSEParser

STREAM = (
    b": keep-alive\r\n\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b'event: message\nid: 7\nretry: 100\ndata: {"b": 2}\n\n'
    b"data: line1\ndata: line2\n\n"
    b"data:nospace\r\r"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b"line1\nline2", b"nospace", b"[DONE]"]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    p, out, last = SSEParser(), [], 0
    for c in sorted(set(cuts)) + [len(data)]:
        out += p.feed(data[last:c])
        last = c
    return out + p.close()


def test_whole_stream_gives_each_event_once():
    # 5 data events; the comment, event/id/retry fields produce nothing; CR CR is a line end + blank line
    assert parse_in_pieces(STREAM, []) == EXPECTED


def test_one_byte_at_a_time():
    assert parse_in_pieces(STREAM, list(range(len(STREAM)))) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts):
    assert parse_in_pieces(STREAM, cuts) == EXPECTED


def test_crlf_split_between_reads_is_one_line_end():
    # "data: x\r" | "\n\r\n": if the held-back CR were a line end of its own, "\r" + "\n" would make an extra
    # blank line; the event must still come out exactly once
    p = SSEParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\n\r\n") == [b"x"]
    assert p.close() == []


def test_event_without_final_blank_line_is_kept_at_close():
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: b") == [b"a"]
    assert p.close() == [b"b"]


def test_unknown_field_is_malformed_and_events_before_it_are_kept():
    p = SSEParser()
    assert p.feed(b"data: 1\n\ngarbage line\n\ndata: 2\n\n") == [b"1"]
    assert "malformed SSE line b'garbage line'" in str(p.error)
    with pytest.raises(SSEError, match="malformed SSE line"):
        p.feed(b"data: 3\n\n")


def test_huge_event_in_many_reads_and_the_limit():
    big = b"data: " + b"x" * (3 << 20) + b"\n\n"
    p = SSEParser(max_bytes=4 << 20)
    out = []
    for i in range(0, len(big), 65536):
        out += p.feed(big[i : i + 65536])
    assert out == [b"x" * (3 << 20)]
    small = SSEParser(max_bytes=1024)
    with pytest.raises(SSEError, match="larger than 1024"):
        for _ in range(0, 4096, 100):
            small.feed(b"y" * 100)


def test_an_event_of_many_data_lines_costs_linear_time():
    # 8 MiB in 32,768 data lines of 256 bytes, fed in 64 KiB reads: rebuilding the event per line copies
    # ~128 GiB (seconds of CPU); appending lines and joining once at the blank line copies it twice (milliseconds)
    value = b"y" * 255
    event = (b"data: " + value + b"\n") * 32768 + b"\n"
    p, out = SSEParser(max_bytes=16 << 20), []
    t = time.process_time()
    for i in range(0, len(event), 65536):
        out += p.feed(event[i : i + 65536])
    assert time.process_time() - t < 1.0
    assert out == [b"\n".join([value] * 32768)] and p.idle()


def test_the_limit_applies_to_an_event_of_many_short_lines():
    # 20 data lines of 100 bytes = 2,019 bytes joined: over a 1,024-byte limit though no line is; the event
    # before it is kept, the stream fails at the line that crosses the limit
    p = SSEParser(max_bytes=1024)
    out = p.feed(b"data: a\ndata: b\n\n" + (b"data: " + b"z" * 100 + b"\n") * 20 + b"\n")
    assert out == [b"a\nb"]
    assert str(p.error) == "event larger than 1024 bytes"
    with pytest.raises(SSEError, match="larger than 1024"):
        p.close()


VALUE = st.lists(st.sampled_from([b"a", b" ", b"data: ", b":", b"{}", b"\n"]), max_size=8).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUE, min_size=1, max_size=12), st.lists(st.integers(0, 12), max_size=5))
def test_reads_of_whole_events_give_each_data_line_event_once(values, cuts):
    # Reads that hold whole events only (a response's tail, a client that fell behind) are split in one step
    # when every event is one `data: ` line; a value with a LF is two data lines, read line by line: the same
    # events either way (a data line's LF joins them).
    events = [b"data: " + v.replace(b"\n", b"\ndata: ") + b"\n\n" for v in values]
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    p, out = SSEParser(), []
    for a, b in zip(bounds, bounds[1:]):
        out += p.feed(b"".join(events[a:b]))
    assert out + p.close() == values
