"""Incremental Server-Sent Events parser: bytes in any split (mid-line, CRLF, many events a read) -> data payloads."""

from __future__ import annotations

_KNOWN_FIELDS = (b"event", b"id", b"retry")


class SSEError(ValueError):
    """The stream is not valid SSE (a line with an unknown field, or an event larger than the limit)."""


class SSEParser:
    """Feed raw bytes as they arrive; get back the `data` of each completed event.

    Line ends are LF, CRLF or CR (a CR at the end of one read may be the first half of a CRLF, so it is held
    back). Comments (`:` lines, keep-alives) and `event`/`id`/`retry` fields are skipped; any other field is
    malformed input and raises SSEError, because a benchmark must not quietly drop what it cannot read.
    A line with no line end yet is kept as a list of pieces, and an event's later data lines as a list joined
    once at its blank line, so a multi-MB event costs linear time however it is split into reads and lines.
    `max_bytes` bounds an event (its data lines joined) and a line still without its end.
    """

    __slots__ = ("_pieces", "_pending", "_data", "_more", "_size", "_cr", "max_bytes", "error")

    def __init__(self, max_bytes: int = 64 << 20):
        self._pieces: list[bytes] = []  # the unterminated tail of the stream
        self._pending = 0  # bytes in _pieces
        self._data: bytes | None = None  # the first data line of the event being read
        self._more: list[bytes] = []  # its later data lines (the event is all of them joined with LF)
        self._size = 0  # bytes of the event joined, once it has a second data line
        self._cr = False  # the previous read ended with CR
        self.max_bytes = max_bytes
        self.error: SSEError | None = None  # set by a malformed line; the events before it were returned

    def feed(self, chunk: bytes) -> list[bytes]:
        """Events completed by `chunk`. After a malformed line: the events before it, with `error` set; any
        later call raises that error."""
        if self.error is not None:
            raise self.error
        if (
            chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and self._data is None
            and not self._pieces
            and not self._cr
            and b"\r" not in chunk
        ):
            # Whole one-line `data: ` events only (a streamed token's usual read, or a response's tail): each
            # event brings exactly the two LFs that end it, so no other line end is there to look at.
            joints = chunk.count(b"\n\ndata: ")
            if chunk.count(b"\n") == 2 * joints + 2:
                return chunk[6:-2].split(b"\n\ndata: ") if joints else [chunk[6:-2]]
        if self._cr:
            chunk = b"\r" + chunk
            self._cr = False
        if b"\r" in chunk:
            if chunk[-1:] == b"\r":
                self._cr, chunk = True, chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._keep(chunk)
            return []
        if self._pieces:
            self._pieces.append(chunk)
            chunk = b"".join(self._pieces)
            self._pieces, self._pending = [], 0
        lines = chunk.split(b"\n")
        self._keep(lines.pop())
        out: list[bytes] = []
        try:
            for line in lines:
                if line[:6] == b"data: " and self._data is None:  # the common case, inlined
                    self._data = line[6:]
                elif not line and self._data is not None and not self._more:
                    out.append(self._data)
                    self._data = None
                else:
                    self._line(line, out)
        except SSEError as e:
            self.error = e
        return out

    def idle(self) -> bool:
        """Between events: no partial line, event or CR held back, no error (the next read starts afresh)."""
        return self._data is None and not self._pieces and not self._cr and self.error is None

    def close(self) -> list[bytes]:
        """End of stream: a last line without its line end, and an event without its blank line, still count."""
        if self.error is not None:
            raise self.error
        out: list[bytes] = []
        if self._pieces:
            line = b"".join(self._pieces)
            self._pieces, self._pending = [], 0
            self._line(line, out)
        self._line(b"", out)
        return out

    def _keep(self, piece: bytes) -> None:
        if piece:
            self._pending += len(piece)
            if self._pending + self._size > self.max_bytes:
                raise SSEError(f"event larger than {self.max_bytes} bytes")
            self._pieces.append(piece)

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if not line:
            if self._data is not None:
                out.append(b"\n".join([self._data, *self._more]) if self._more else self._data)
                self._data, self._more, self._size = None, [], 0
            return
        if line[:5] == b"data:":
            value = line[6:] if line[5:6] == b" " else line[5:]
            if self._data is None:
                self._data = value
                return
            self._size += (0 if self._more else len(self._data)) + 1 + len(value)
            if self._size > self.max_bytes:
                raise SSEError(f"event larger than {self.max_bytes} bytes")
            self._more.append(value)
        elif line[:1] != b":" and line.partition(b":")[0] not in _KNOWN_FIELDS:
            raise SSEError(f"malformed SSE line {line[:80]!r}")
