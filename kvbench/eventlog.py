"""The event log: Parquet schemas, a buffered part writer that survives SIGKILL, and the run.json manifest."""

from __future__ import annotations

import errno
import json
import operator
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kvbench import requestparts
from kvbench.logcolumns import column, dictionary, to_table
from kvbench.records import Request

SCHEMA_VERSION = 1

EVENTS = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("req_id", pa.int64()),
        ("kind", pa.dictionary(pa.int8(), pa.string())),
        ("instance", pa.string()),
        ("tokens", pa.int32()),
        ("cached_tokens", pa.int32()),
        ("tier", pa.string()),
        ("nbytes", pa.int64()),
        ("detail", pa.string()),
    ]
)
REQUESTS = pa.schema(
    [
        ("req_id", pa.int64()),
        ("session_id", pa.int64()),
        ("turn", pa.int32()),
        ("arrival_ns", pa.int64()),
        ("input_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("reason_tokens", pa.int32()),
        ("block_tokens", pa.int32()),
        ("n_blocks", pa.int32()),
        ("trace_reuse_tokens", pa.int32()),
        ("workload", pa.string()),
    ]
)
STEPS = pa.schema(
    [
        ("instance", pa.string()),
        ("t_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("n_steps", pa.int32()),
        ("batch", pa.int32()),
        ("prefill_tokens", pa.int32()),
        ("decode_tokens", pa.int32()),
        ("kv_blocks_used", pa.int64()),
        ("kv_blocks_total", pa.int64()),
    ]
)
SERVER_METRICS = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("name", pa.string()),
        ("labels", pa.string()),
        ("value", pa.float64()),
    ]
)
TABLES = {"events": EVENTS, "requests": REQUESTS, "steps": STEPS, "server_metrics": SERVER_METRICS}

# A request's fields in REQUESTS' order, up to block_tokens (the row then has n_blocks, trace reuse, workload)
_STATIC = operator.itemgetter(0, 6, 7, 1, 2, 3, 9, 5)
FLUSH_ROWS = 65_536  # rows per part at most: bounds a buffer's memory in a fast (simulated) run (~15 MB)
FLUSH_NS = 1_000_000_000  # a real-time buffer is written once it is this old: a SIGKILL loses at most ~1 s of it
CHECK_ROWS = 4096  # EventLog.check looks at the buffers' age and size once per this many new events
COMPACT_OVER_PARTS = 64  # a long real-time run leaves many small (1 s) parts; merge them on a clean close


def table_glob(run_dir: str | os.PathLike, table: str = "events") -> str:
    """The glob DuckDB/pyarrow read a table of a run from (one file per flushed part, per worker)."""
    return str(Path(run_dir) / table / "*.parquet")


def table_parts(run_dir: str | os.PathLike, table: str = "events") -> list[str]:
    """The table's Parquet parts as an explicit, sorted list: safe to bind as a value wherever the run's path may
    hold `[`, `*` or `?`, which a glob would expand."""
    return sorted(str(p) for p in (Path(run_dir) / table).glob("*.parquet"))


def _write_options(schema: pa.Schema) -> dict:
    """zstd, and dictionary pages for the string columns only: integer columns (times, ids) rarely repeat, so
    trying a dictionary for them costs time and, once it falls back, size (~25 % faster, ~40 % smaller files)."""
    strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)]
    return {"compression": "zstd", "use_dictionary": strings}


class PartWriter:
    """One table of a run: `append(row)` buffers a tuple in schema order; buffered rows are written as numbered
    Parquet parts in `dir/` when the log finds them due (EventLog.check / tick / close, or after an `extend`).

    Each part is written to a temporary name and renamed, so a killed process leaves only complete files.
    """

    __slots__ = (
        "dir",
        "schema",
        "prefix",
        "realtime",
        "rows",
        "append",
        "parts",
        "written",
        "_last_flush_ns",
        "_options",
    )

    def __init__(self, directory: Path, schema: pa.Schema, prefix: str = "part", realtime: bool = False):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.schema, self.prefix, self.realtime = schema, prefix, realtime
        self.rows: list[tuple] = []  # the buffer; emptied in place by a flush, never replaced
        self.append = self.rows.append  # per row on hot paths (sim steps): a bare list append, no check
        self.parts: list[Path] = []
        self.written = 0
        self._last_flush_ns = time.monotonic_ns()
        self._options = _write_options(schema)

    def extend(self, rows: Iterable[tuple]) -> None:
        self.rows.extend(rows)
        self.flush_if_due()

    def pending(self) -> int:
        """Rows buffered, not yet in a part."""
        return len(self.rows)

    def flush_if_due(self) -> None:
        """Write the buffer if it is full or, in a real-time run, its oldest row is about a second old. A
        virtual-time run's parts are cut by row count alone, so the same run writes the same parts however fast
        the machine (or valgrind) runs it."""
        n = self.pending()
        if n and (n >= FLUSH_ROWS or self.realtime and time.monotonic_ns() - self._last_flush_ns >= FLUSH_NS):
            self.flush()

    def _take_table(self) -> pa.Table:
        """The buffered rows as a table; the buffers are emptied in place (callers hold bound appends)."""
        table = to_table(self.rows, self.schema)
        self.rows.clear()
        return table

    def flush(self) -> None:
        self._last_flush_ns = time.monotonic_ns()
        n = self.pending()
        if not n:
            return
        path = self.dir / f"{self.prefix}-{len(self.parts):05d}.parquet"
        tmp = path.with_suffix(".tmp")
        table = self._take_table()
        try:
            pq.write_table(table, tmp, **self._options)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a part half written (disk full): its space back, never read
            raise
        os.replace(tmp, path)
        self.parts.append(path)
        self.written += n
        self._wrote(table, path)

    def _wrote(self, table: pa.Table, path: Path) -> None:
        """After a part is written: the events writer adds its per-request part (requestparts.py)."""

    def close(self) -> None:
        self.flush()
        if self.realtime and len(self.parts) > COMPACT_OVER_PARTS:
            self._compact()

    def _compact(self) -> None:
        merged = self.dir / f"{self.prefix}-all.parquet"
        tmp = merged.with_suffix(".tmp")
        with pq.ParquetWriter(tmp, self.schema, **self._options) as out:
            for part in self.parts:
                out.write_table(pq.read_table(part, schema=self.schema))
        os.replace(tmp, merged)
        self._compacted(merged)
        for part in self.parts:
            part.unlink()
        self.parts = [merged]

    def _compacted(self, merged: Path) -> None:
        """After self.parts are merged into one file, before they are removed (see _wrote)."""


class EventsWriter(PartWriter):
    """The events table's writer, with a second buffer for CHUNK events as (t_ns, req_id, tokens) 3-tuples.

    A real-time target emits one CHUNK per network read, ~10^5 a second: appended straight here they skip the
    replayer's callback (they are never terminal) and the 9-column transpose, ~1 us a token of client CPU
    (tests/bench/bench_http.py). They land in the same parts, after that flush's other rows (readers order by
    t_ns)."""

    __slots__ = ("chunks",)

    def __init__(self, directory: Path, prefix: str = "part", realtime: bool = False):
        super().__init__(directory, EVENTS, prefix, realtime)
        self.chunks: list[tuple[int, int, int]] = []

    def pending(self) -> int:
        return len(self.rows) + len(self.chunks)

    def _take_table(self) -> pa.Table:
        tables = [super()._take_table()] if self.rows else []
        if self.chunks:
            tables.append(_chunk_table(self.chunks))
            self.chunks.clear()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _wrote(self, table: pa.Table, path: Path) -> None:
        requestparts.write(table, path)

    def _compacted(self, merged: Path) -> None:
        requestparts.merge(self.parts, merged)


def _chunk_table(chunks: list[tuple[int, int, int]]) -> pa.Table:
    """CHUNK rows from (t_ns, req_id, tokens): three columns converted, `kind` a constant, the rest null."""
    t_ns, req_id, tokens = zip(*chunks)
    n = len(chunks)
    given = {
        "t_ns": column(t_ns, pa.int64()),
        "req_id": column(req_id, pa.int64()),
        "kind": dictionary(("CHUNK",) * n, EVENTS.field("kind").type),
        "tokens": column(tokens, pa.int32()),
    }
    columns = [given[f.name] if f.name in given else pa.nulls(n, f.type) for f in EVENTS]
    return pa.Table.from_arrays(columns, schema=EVENTS)


class EventLog:
    """The event log of one run (or one worker of a run), and the only way targets and the replayer write.

    Writing: `emit(event)` (an Event or a 9-tuple in Event's field order), `emit_chunk((t_ns, req_id, tokens))`,
    `write_request(req, trace_reuse_tokens)`, `table(name).append(row)` for a side table (`steps`,
    `server_metrics`; tuples in that table's schema order). These only buffer. When buffers reach disk is
    decided here: `check()` (cheap: call it often, e.g. per finished request) and `tick()` (call it a few times
    a second in a real-time run) write each table whose buffer is full or (real time) a second old; `close()` writes the rest.
    """

    def __init__(self, run_dir: str | os.PathLike, realtime: bool = False, worker: int | None = None):
        self.run_dir = Path(run_dir)
        self.realtime = realtime  # t_ns is wall-clock time (flushes by age matter) rather than virtual time
        self._prefix = "part" if worker is None else f"w{worker:03d}"
        self.events = EventsWriter(self.run_dir / "events", self._prefix, realtime)
        self.requests = PartWriter(self.run_dir / "requests", REQUESTS, self._prefix, realtime)
        self._writers: list[PartWriter] = [self.events, self.requests]
        self._extra: dict[str, PartWriter] = {}
        self.emit = self.events.append  # per event: a bare list append, looked at by check()
        self.emit_chunk = self.events.chunks.append  # (t_ns, req_id, tokens) of a CHUNK event, see EventsWriter
        self._event_rows = self.events.rows
        self._check_at = CHECK_ROWS

    def write_request(self, req: Request, trace_reuse_tokens: int | None) -> None:
        """The request's static facts (one row of `requests`); trace_reuse_tokens: None when not tracked."""
        self.requests.append(
            (
                req.req_id,
                req.session_id,
                req.turn,
                req.arrival_ns,
                req.input_tokens,
                req.output_tokens,
                req.reason_tokens,
                req.block_tokens,
                len(req.hash_ids),
                trace_reuse_tokens,
                req.workload,
            )
        )

    def write_requests(self, reqs: Iterable[Request], trace_reuse_tokens: Iterable[int | None]) -> None:
        """write_request of each request with its trace-implied reuse, in one pass (the replayer's batches)."""
        self.requests.rows.extend(
            (*_STATIC(r), len(r.hash_ids), reuse, r.workload) for r, reuse in zip(reqs, trace_reuse_tokens)
        )

    def table(self, name: str) -> PartWriter:
        """Writer of a side table (`steps`, `server_metrics`; see TABLES), created on first use."""
        if name not in self._extra:
            if name not in TABLES or name in ("events", "requests"):
                raise KeyError(f"no side table {name!r}; side tables: steps, server_metrics")
            self._extra[name] = PartWriter(self.run_dir / name, TABLES[name], self._prefix, self.realtime)
            self._writers.append(self._extra[name])
        return self._extra[name]

    def check(self) -> None:
        """Every CHECK_ROWS events: write the tables that are due (one comparison otherwise)."""
        if len(self._event_rows) >= self._check_at:
            self.tick()

    def tick(self) -> None:
        """Write each table whose buffer is full or (real time) about a second old."""
        for w in self._writers:
            w.flush_if_due()
        self._check_at = len(self._event_rows) + CHECK_ROWS

    def events_logged(self) -> int:
        """Events written and still buffered."""
        return self.events.written + self.events.pending()

    def close(self) -> None:
        for w in self._writers:
            w.close()


def write_manifest(run_dir: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Write run.json atomically (a kill mid-write leaves the previous version). On a full disk, where the new
    copy finds no room, it is rewritten in place: truncating frees the old copy's blocks for the new one, so a
    failed run does not keep saying `running`."""
    path = Path(run_dir) / "run.json"
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n"
    try:
        tmp.write_text(text)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or not path.is_file():
            raise
        path.write_text(text)
        return
    os.replace(tmp, path)


def read_manifest(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: not a kvbench run directory (no run.json)")
    return json.loads(path.read_text())
