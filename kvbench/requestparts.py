"""Per-request parts: beside each events part, one row per request in it holding mergeable partial aggregates.

The summary's per-request pivot (analysis/sql/request_events.sql) and the pairing of KV transfers need every
event of a run; for a million-request run that is most of the first `kvbench summary`. The writer already holds
each part as an Arrow table, so it also writes RUN/request_parts/<same name>.parquet: a group-by over that table
(numpy over its buffers, no Python loop per row). Every column merges exactly across parts (min, max, or sum), so
the summary builds request_events from these rows (analysis/sql/request_parts.sql) when every events part has
its per-request part. They are derived and rebuildable: a run without them (older, foreign, or killed between the
two writes) is pivoted from its events as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DIR = "request_parts"  # RUN/request_parts/<events part name>: the part's per-request rows
TERMINAL = ("FINISH", "ERROR", "REJECT", "CANCEL")
KV_START, KV_END = ("KV_XFER_START",), ("KV_XFER_END",)
# the simulator's layer-wise streaming: the wire began before the START, at the time this detail names
WIRE = re.compile(rb"layerwise_from_ns=([0-9]+)")

# (column, aggregate, source column, kinds it is over or None for all). Each merges across parts by the same
# aggregate (count: by sum). out_max and out_sum stay apart: out_tokens is max(LAST_TOKEN, FINISH) else the
# sum over FIRST_TOKEN and CHUNK, which only the merged rows can decide. The kv_* columns of START and END are
# those of the part's transfer event (the smallest value of each where a part holds several: the summary then
# pairs that request's transfers from the events instead).
FIELDS: tuple[tuple[str, str, str, tuple[str, ...] | None], ...] = (
    ("arrive_ns", "min", "t_ns", ("ARRIVE",)),
    ("arrive_tokens", "max", "tokens", ("ARRIVE",)),
    ("send_ns", "min", "t_ns", ("SEND",)),
    ("route_ns", "min", "t_ns", ("ROUTE",)),
    ("prefill_start_ns", "min", "t_ns", ("PREFILL_START",)),
    ("prefill_instance", "min", "instance", ("PREFILL_START",)),
    ("decode_start_ns", "min", "t_ns", ("DECODE_START",)),
    ("decode_instance", "min", "instance", ("DECODE_START",)),
    ("first_ns", "min", "t_ns", ("FIRST_TOKEN",)),
    ("first_instance", "min", "instance", ("FIRST_TOKEN",)),
    ("last_ns", "max", "t_ns", ("LAST_TOKEN",)),
    ("end_ns", "min", "t_ns", TERMINAL),
    ("status", "max", "kind", TERMINAL),
    ("detail", "max", "detail", TERMINAL),
    ("out_max", "max", "tokens", ("LAST_TOKEN", "FINISH")),
    ("out_sum", "sum", "tokens", ("FIRST_TOKEN", "CHUNK")),
    ("n_chunks", "count", "kind", ("CHUNK",)),
    ("cached_tokens", "max", "cached_tokens", None),
    ("preemptions", "count", "kind", ("PREEMPT",)),
    ("migrations", "count", "kind", ("MIGRATE",)),
    ("last_event_ns", "max", "t_ns", None),
    ("kv_starts", "count", "kind", KV_START),
    ("kv_start_ns", "min", "t_ns", KV_START),
    ("kv_wire_ns", "min", "wire_ns", KV_START),
    ("kv_tier", "min", "tier", KV_START),
    ("kv_nbytes", "min", "nbytes", KV_START),
    ("kv_instance", "min", "instance", KV_START),
    ("kv_ends", "count", "kind", KV_END),
    ("kv_end_ns", "min", "t_ns", KV_END),
    ("kv_end_nbytes", "min", "nbytes", KV_END),
)
_TYPES = {"t_ns": pa.int64(), "wire_ns": pa.int64(), "tokens": pa.int32(), "cached_tokens": pa.int32()}
_TYPES |= {"nbytes": pa.int64(), "instance": pa.string(), "tier": pa.string(), "detail": pa.string()}
_TYPES |= {"kind": pa.string()}
SCHEMA = pa.schema(
    [("req_id", pa.int64())]
    + [(name, pa.int64() if agg in ("count", "sum") else _TYPES[source]) for name, agg, source, _ in FIELDS]
)

# zstd, dictionary pages for the string columns only (as the events parts), and the integers delta-coded: rows come
# ordered by req_id, which mostly follows arrival, so each time column mostly rises (a third smaller than plain)
_OPTIONS = {
    "compression": "zstd",
    "use_dictionary": [f.name for f in SCHEMA if pa.types.is_string(f.type)],
    "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in SCHEMA if pa.types.is_integer(f.type)},
}


def path_for(events_part: str | os.PathLike) -> Path:
    """The per-request part of RUN/events/<name>.parquet: RUN/request_parts/<name>.parquet."""
    part = Path(events_part)
    return part.parent.parent / DIR / part.name


def partial_rows(events: pa.Table) -> pa.Table:
    """One row per req_id of an events table (kvbench.eventlog.EVENTS), in SCHEMA, ordered by req_id.

    numpy over the columns' buffers (each row's group from np.unique, then one ufunc.at per column over the rows
    of its kinds): pyarrow's group-by and compute functions would import pandas and pyarrow.compute into every
    replay (~0.1-0.5 s)."""
    kind = events.column("kind").combine_chunks()  # one dictionary for all chunks
    codes = _kind_codes(kind)
    masks = {kinds: _kind_mask(kind, codes, kinds) for kinds in dict.fromkeys(k for _, _, _, k in FIELDS)}
    ids, ids_valid, group = _groups(events.column("req_id"))
    sources = _sources(events, kind, masks)
    out: dict[str, pa.Array] = {"req_id": _int_array(ids, ids_valid, pa.int64())}
    for name, agg, source, kinds in FIELDS:
        if agg == "count":
            out[name] = _int_array(np.bincount(group[masks[kinds]], minlength=len(ids)), None, pa.int64())
            continue
        values, valid, words = sources[source]
        got, has = _reduce(values, valid & masks[kinds], agg, group, len(ids))
        out[name] = _int_array(got, has, SCHEMA.field(name).type) if words is None else _string_array(words, got, has)
    return pa.Table.from_arrays([out[f.name] for f in SCHEMA], schema=SCHEMA)


def _groups(req_id: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct req_ids in order (a NULL one last, its own group, as in SQL), whether each is not NULL, and
    each row's group."""
    values, valid = _ints(req_id)
    if valid.all():
        ids, group = np.unique(values, return_inverse=True)
        return ids, np.ones(len(ids), bool), group
    pairs, group = np.unique(np.column_stack((~valid, np.where(valid, values, 0))), axis=0, return_inverse=True)
    return pairs[:, 1], pairs[:, 0] == 0, group.ravel()


Source = tuple[np.ndarray, np.ndarray, list[bytes] | None]  # values, valid, and a string column's sorted words


def _sources(events: pa.Table, kind: pa.DictionaryArray, masks: dict) -> dict[str, Source]:
    """Each source column as numpy (values, valid, None); a string column as (ranks, valid, its sorted distinct
    values), ranked only where a field reads it (its kinds)."""
    n = len(kind)
    sources: dict[str, Source] = {
        c: (*_ints(events.column(c)), None) for c in ("t_ns", "tokens", "cached_tokens", "nbytes")
    }
    for name in ("instance", "tier", "detail"):
        wanted = np.logical_or.reduce([masks[kinds] for _, _, source, kinds in FIELDS if source == name])
        sources[name] = _ranks(events.column(name).combine_chunks(), np.flatnonzero(wanted))
    ranks, _, words = _ranks(kind.dictionary, np.arange(len(kind.dictionary)))
    indices, valid = _ints(kind.indices)
    sources["kind"] = (ranks[np.where(valid, indices, 0)] if words else np.zeros(n, np.int64), valid, words)
    detail = events.column("detail").combine_chunks()
    sources["wire_ns"] = (_wire_ns(detail, np.flatnonzero(masks[KV_START]), sources["t_ns"][0]), np.ones(n, bool), None)
    return sources


def _kind_codes(kind: pa.DictionaryArray) -> np.ndarray:
    """Each event's index into the kinds' dictionary, one past its end where the kind is null."""
    indices, valid = _ints(kind.indices)
    return np.where(valid, indices, len(kind.dictionary))


def _kind_mask(kind: pa.DictionaryArray, codes: np.ndarray, kinds: tuple[str, ...] | None) -> np.ndarray:
    """Where the event's kind is one of `kinds` (None: every event), looked up in the few distinct kinds."""
    if kinds is None:
        return np.ones(len(kind), bool)
    hit = np.array([w in kinds for w in kind.dictionary.to_pylist()] + [False], dtype=bool)
    return hit[codes]


_DTYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _ints(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (any number where null) and where it is valid, from its buffers
    (Array.to_numpy would import pandas)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n, dtype = len(array), np.dtype(_DTYPES[array.type])
    bitmap, data = array.buffers()[:2]
    values = np.frombuffer(data, dtype, n, array.offset * dtype.itemsize).astype(np.int64)
    return values, _valid(bitmap, array.offset, n) if array.null_count else np.ones(n, bool)


def _valid(bitmap: pa.Buffer, offset: int, n: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
    return bits[offset : offset + n].astype(bool)


def _reduce(values: np.ndarray, valid: np.ndarray, agg: str, group: np.ndarray, n: int) -> tuple:
    """min, max or sum of the valid values per group (of n), and whether the group has any (else NULL, as SQL's
    aggregates)."""
    rows = np.flatnonzero(valid)
    at = group[rows]
    has = np.zeros(n, bool)
    has[at] = True
    if agg == "sum":
        got = np.zeros(n, np.int64)
        np.add.at(got, at, values[rows])
        return got, has
    got = np.full(n, np.iinfo(np.int64).max if agg == "min" else np.iinfo(np.int64).min)
    (np.minimum if agg == "min" else np.maximum).at(got, at, values[rows])
    return got, has


def _int_array(values: np.ndarray, valid: np.ndarray | None, type_: pa.DataType) -> pa.Array:
    data = values.astype(_DTYPES[type_]) if valid is None else np.where(valid, values, 0).astype(_DTYPES[type_])
    bitmap = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(data)])


def _strings(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A string array's offsets (int64), bytes and validity, from its buffers."""
    n = len(array)
    bitmap, offsets, data = array.buffers()
    off = np.frombuffer(offsets, np.int32, n + 1, array.offset * 4).astype(np.int64)
    blob = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return off, blob, _valid(bitmap, array.offset, n) if array.null_count else np.ones(n, bool)


def _ranks(array: pa.Array, rows: np.ndarray) -> Source:
    """The strings at `rows` (the others do not matter) as ranks among their sorted distinct values (bytewise, as
    DuckDB orders them), where the column is valid, and those values: integers reduce far faster than strings."""
    off, blob, valid = _strings(array)
    rows = rows[valid[rows]]
    ranks = np.zeros(len(array), np.int64)
    if not len(rows):
        return ranks, np.zeros(len(array), bool), []
    begin, lengths = off[rows], off[rows + 1] - off[rows]
    width = max(int(lengths.max()), 1)
    padded = np.zeros((len(rows), width), np.uint8)  # each string NUL-padded to one width: numpy sorts those
    inside = np.arange(width) < lengths[:, None]
    padded[inside] = blob[(begin[:, None] + np.arange(width))[inside]]
    distinct, inverse = _distinct_rows(padded) if width <= len(_WEIGHTS) else _sorted_rows(padded)
    words = distinct.view(f"S{width}").ravel()
    order = np.argsort(words, kind="stable")  # the few distinct strings, bytewise
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    ranks[rows] = rank[inverse]
    return ranks, valid, words[order].tolist()


def _weights(n: int) -> np.ndarray:
    """n odd 64-bit multipliers (a Weyl sequence), one per byte position of a padded string."""
    return np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) | np.uint64(1)


_WEIGHTS = _weights(4096)


def _distinct_rows(padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D uint8 array and each row's index among them. A column's strings repeat (a few
    instances and tiers), so the rows are told apart by a 64-bit hash of their bytes, checked against the first
    row of each hash (a collision, never seen, falls back to sorting the rows themselves)."""
    keys = padded.astype(np.uint64) @ _WEIGHTS[: padded.shape[1]]  # wraps modulo 2**64
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if np.array_equal(padded[first][inverse], padded):
        return padded[first], inverse
    return _sorted_rows(padded)


def _sorted_rows(padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    distinct, inverse = np.unique(padded, axis=0, return_inverse=True)
    return distinct, inverse.ravel()


def _string_array(words: list[bytes], ranks: np.ndarray, valid: np.ndarray) -> pa.Array:
    """Arrow strings words[rank] (NULL where not valid), gathered with numpy."""
    lengths = np.array([len(w) for w in words] + [0], np.int64)
    word_at = np.r_[0, np.cumsum(lengths)[:-1]]
    pick = np.where(valid, ranks, len(words))
    size = lengths[pick]
    offsets = np.r_[0, np.cumsum(size)]
    index = np.repeat(word_at[pick] - offsets[:-1], size) + np.arange(offsets[-1])
    data = np.frombuffer(b"".join(words), np.uint8)[index] if len(index) else np.zeros(0, np.uint8)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), len(ranks), [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def _wire_ns(detail: pa.Array, rows: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """Where each KV transfer's wire began (read at `rows`, the STARTs; t_ns elsewhere): the first
    `layerwise_from_ns=<digits>` of its detail that fits in 64 bits, else its t_ns (as kv_transfers.sql)."""
    wire = t_ns.copy()
    off, blob, valid = _strings(detail)
    rows = rows[valid[rows]]
    search, found = WIRE.search, []
    raw = blob.tobytes()
    for begin, end in zip(off[rows].tolist(), off[rows + 1].tolist()):  # one per KV transfer, not per event
        match = search(raw, begin, end)
        found.append(int(match[1]) if match else -1)
    value = np.array(found, dtype=object)
    fits = (value >= 0) & (value < 2**63)
    wire[rows[fits]] = value[fits].astype(np.int64)
    return wire


def write(events: pa.Table, events_part: Path) -> None:
    """Write the per-request part of an events part just written (atomically: a temporary name, then renamed).
    One that cannot be written (disk full) is left out: the summary then pivots the events instead."""
    path = path_for(events_part)
    try:
        path.parent.mkdir(exist_ok=True)
        _write_table(partial_rows(events), path)
    except OSError:
        return


def merge(events_parts: list[Path], merged: Path) -> None:
    """The per-request part of `merged`, the events parts compacted into one file: their per-request rows
    concatenated (they merge by the same aggregates, so one row per request per former part is exact). If one of
    them was left out, or the merged one cannot be written, there is none: the summary then pivots the events,
    and the compaction (which must not fail, or the log would keep its parts beside their merged copy) goes on."""
    derived = [path_for(p) for p in events_parts]
    try:
        if all(p.is_file() for p in derived):
            _write_table(pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in derived]), path_for(merged))
    except (OSError, pa.ArrowException):  # disk full, or a part that does not read back
        pass
    for p in derived:
        p.unlink(missing_ok=True)


def _write_table(table: pa.Table, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        pq.write_table(table, tmp, **_OPTIONS)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def rebuild(run_dir: str | os.PathLike) -> int:
    """Write the per-request part of each events part of a run that lacks one (a run written before them, or
    killed between the two writes); returns how many were written. Reads each events part whole."""
    written = 0
    for part in sorted((Path(run_dir) / "events").glob("*.parquet")):
        if not path_for(part).is_file():
            path_for(part).parent.mkdir(exist_ok=True)
            _write_table(partial_rows(pq.read_table(part)), path_for(part))
            written += 1
    return written
