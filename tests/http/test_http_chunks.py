"""Chunked transfer coding's fast paths: a run of whole chunks split in C gives exactly what the chunk-by-chunk
walk gives (payloads and where the run ends), whatever the payloads hold (CRLF, CR, LF), extensions, the last
chunk or a partial chunk after the run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.http import chunks
from kvbench.http.chunks import whole_chunk, whole_chunks

PAYLOAD = st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\r\n", b"data: x\n\n", b"0\r\n"]), max_size=60).map(b"".join)


def frame(payload: bytes, ext: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(payload), ext, payload)


def expected(payloads: list[bytes], stop: int) -> tuple[list[bytes], int]:
    """The walk's answer: the non-empty payloads before the first chunk it does not take (`stop`)."""
    taken = []
    for p in payloads[:stop]:
        if not p:
            break
        taken.append(p)
    return taken, len(b"".join(frame(p) for p in taken))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(PAYLOAD, min_size=1, max_size=40),
    st.integers(0, 45),
    st.sampled_from([b"", b";ext=1", b"0\r\n\r\n", b"5\r\nab"]),
)
def test_a_run_split_in_c_ends_where_the_walk_ends(payloads, stop, after):
    # the chunk at `stop` carries an extension (the walk leaves it to the state machine), then `after`: the
    # last chunk, a partial chunk or nothing; an empty payload is a size-0 chunk, which ends the run as well
    stop = min(stop, len(payloads))
    parts = [frame(p, b";ext=1" if i == stop else b"") for i, p in enumerate(payloads)]
    buf = b"PREFIX" + b"".join(parts) + after
    want, end = expected(payloads, stop)
    for bulk in (0, 1 << 40):  # split in C from the first byte, or never
        chunks.BULK_BYTES = bulk
        try:
            out: list[bytes] = []
            assert (whole_chunks(buf, 6, out), out) == (6 + end, want)
        finally:
            chunks.BULK_BYTES = 1024


def test_a_long_run_is_split_in_c_and_stops_at_a_payload_the_pairing_misreads():
    tokens = [b'data: {"text":" w%d"}\n\n' % i for i in range(60)]
    buf = b"".join(frame(t) for t in tokens) + b"0\r\n\r\n"
    assert len(buf) > chunks.BULK_BYTES
    out: list[bytes] = []
    assert whole_chunks(buf, 0, out) == len(buf) - 5 and out == tokens
    crlf = tokens[:30] + [b"data: a\r\n\r\n"] + tokens[30:]  # CRLF line ends in one payload: the walk reads it
    out = []
    assert whole_chunks(b"".join(frame(t) for t in crlf), 0, out) > 0 and out == crlf


def test_one_whole_chunk_alone():
    assert whole_chunk(frame(b"data: x\n\n")) == b"data: x\n\n"
    assert whole_chunk(frame(b"data: x\n\n") + b"1") is None  # more than one chunk: the general path
    assert whole_chunk(b"0\r\n\r\n") is None and whole_chunk(b"zz\r\nab\r\n") is None
