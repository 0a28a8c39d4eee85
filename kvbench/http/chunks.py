"""HTTP/1.1 chunked transfer coding: the size line, and fast paths over reads made of whole chunks.

The connection's state machine (kvbench/http/conn.py) reads any split of a chunked body; these take the common
reads without stepping through it: exactly one whole chunk (a streamed token read alone) and a run of whole
chunks (a response, or the part of one, that arrived while the client was busy: ~20 chunks).
"""

from __future__ import annotations

from itertools import repeat

from kvbench.http.faults import StreamFault

BULK_BYTES = 1024  # from this many bytes on, a run of chunks is split in C rather than walked chunk by chunk


def chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)  # chunk extensions after ';' are ignored
    except ValueError:
        raise StreamFault("protocol", f"bad chunk size {line[:40]!r}") from None


def whole_chunk(data: bytes) -> bytes | None:
    """The payload when `data` is exactly one complete non-empty chunk (a streamed token's usual read), else
    None and the general state machine takes it; the same size parsing as `chunk_size`, without extensions."""
    i = data.find(b"\r\n")
    if 0 < i <= 8 and data.endswith(b"\r\n"):
        try:
            size = int(data[:i], 16)
        except ValueError:
            return None
        if size and i + 4 + size == len(data):
            return data[i + 2 : -2]
    return None


def whole_chunks(buf: bytes, pos: int, out: list[bytes]) -> int:
    """Append the payloads of the complete non-empty chunks from `pos` on to `out`; returns where they end, and
    the state machine takes what follows (the last chunk, a partial one, extensions). The same size parsing as
    `chunk_size`, without extensions."""
    if len(buf) - pos >= BULK_BYTES:
        pos = _split_chunks(buf, pos, out)
    find, startswith, append = buf.find, buf.startswith, out.append
    while True:
        i = find(b"\r\n", pos, pos + 10)
        if i <= pos:
            return pos
        try:
            size = int(buf[pos:i], 16)
        except ValueError:
            return pos
        end = i + 2 + size
        if size <= 0 or not startswith(b"\r\n", end):
            return pos
        append(buf[i + 2 : end])
        pos = end + 2


def _split_chunks(buf: bytes, pos: int, out: list[bytes]) -> int:
    """`whole_chunks` without a Python step a chunk: split at every CRLF, and keep the leading (size, payload)
    pairs whose size is the payload's length. Those pairs are the chunks exactly: a payload holding a CRLF (or
    a size line with an extension) breaks the pairing at the first such chunk, and the walk takes over there."""
    parts = buf[pos:].split(b"\r\n")
    pairs = (len(parts) - 1) // 2  # the last part is not followed by a CRLF: never a whole payload
    sizes, payloads = parts[0 : 2 * pairs : 2], parts[1 : 2 * pairs : 2]
    try:
        claimed = list(map(int, sizes, repeat(16)))
    except ValueError:
        return pos
    lengths = list(map(len, payloads))
    k = claimed.index(0) if 0 in claimed else pairs  # the last chunk (size 0) ends the run
    if claimed[:k] != lengths[:k]:
        return pos  # rare: the walk finds where the pairing breaks
    out.extend(payloads[:k])
    return pos + sum(map(len, sizes[:k])) + sum(lengths[:k]) + 4 * k
