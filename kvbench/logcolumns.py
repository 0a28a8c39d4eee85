"""Arrow tables from buffered row tuples: each column built from numpy buffers in a few C passes, no pandas."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

# Columns are built from numpy buffers, never with pa.array on Python values: pa.array imports pandas on first use
# (the longest single import of a simulated run) and dictionary_encode loads pyarrow's compute kernels.
# A buffer's rows were made over time, so their values lie scattered in memory: every pass over a column's
# values costs cache misses, and each builder below makes as few passes as it can.
_NUMPY: dict[pa.DataType, Any] = {
    pa.int8(): np.int8,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.float64(): np.float64,
}
_EXACT = 2**53  # integers of smaller magnitude are exact in a float64 (2**53 + 1 rounds to 2**53)
_NOT_NUMBERS = (TypeError, ValueError, OverflowError)


def to_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """The rows (tuples in schema order) as a table of `schema`."""
    gc_was_on = gc.isenabled()
    gc.disable()  # transposing ~10^5 rows allocates big tuples; collections here only rescan the buffer (3-5x slower)
    try:
        columns = list(zip(*rows))
        return pa.Table.from_arrays([column(v, f.type) for v, f in zip(columns, schema)], schema=schema)
    finally:
        if gc_was_on:
            gc.enable()


def column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """An Arrow array of `type_` (int32, int64, float64, string or dictionary of strings) from Python values;
    None is null."""
    if pa.types.is_dictionary(type_):
        return dictionary(values, type_)
    if pa.types.is_string(type_):
        return strings(values)
    n, dtype = len(values), _NUMPY[type_]
    if dtype is np.float64:  # fromiter would take None for NaN, a value: nulls go the object path
        if None not in values:
            return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.fromiter(values, dtype, n))])
    else:
        try:  # one pass when no value is null (times, ids)
            return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.fromiter(values, dtype, n))])
        except _NOT_NUMBERS:
            built = _nullable_ints(values, type_)
            if built is not None:
                return built
    obj, valid = _objects(values)
    obj[~valid] = 0
    return pa.Array.from_buffers(type_, n, [*_validity(valid), pa.py_buffer(obj.astype(dtype))])


def _nullable_ints(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    """Integers with nulls through float64 (None becomes NaN in the same C pass), or None when a value is not
    an integer that float64 and the column's type hold exactly (the caller's object path then decides)."""
    try:
        floats = np.array(values, dtype=np.float64)
    except _NOT_NUMBERS:
        return None
    valid = floats == floats
    info = np.iinfo(_NUMPY[type_])
    lo, hi = max(info.min, 1 - _EXACT), min(info.max, _EXACT - 1)
    present = floats[valid]
    if present.size and (present.min() < lo or present.max() > hi or not np.array_equal(present, np.trunc(present))):
        return None
    floats[~valid] = 0
    ints = floats.astype(_NUMPY[type_])
    return pa.Array.from_buffers(type_, len(values), [*_validity(valid), pa.py_buffer(ints)])


def _objects(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The values as an object array, and where they are not None (one C loop each)."""
    obj = np.array(values, dtype=object)
    return obj, obj != None  # noqa: E711  (elementwise on an object array, not an identity test)


def _validity(valid: np.ndarray) -> list[pa.Buffer]:
    return [pa.py_buffer(np.packbits(valid, bitorder="little"))]


def strings(values: Sequence[str | None]) -> pa.Array:
    """A string array. Each distinct value (few in a log's columns: instance, tier, kind of detail) is encoded
    once; the rows are then its code, its length and its bytes, looked up by value."""
    n = len(values)
    code: dict[str | None, Any] = dict.fromkeys(values)
    encoded = {w: b"" if w is None else w.encode() for w in code}
    for i, w in enumerate(code):
        code[w] = i
    codes = np.fromiter(map(code.__getitem__, values), np.int32, n)
    lengths = np.fromiter(map(len, encoded.values()), np.int64, len(encoded))[codes]
    offsets = np.zeros(n + 1, np.int32)  # a part holds at most FLUSH_ROWS rows of short strings: int32 offsets
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(map(encoded.__getitem__, values))
    bitmap = _validity(codes != code[None]) if None in code else [None]
    return pa.Array.from_buffers(pa.string(), n, [*bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


def dictionary(values: Sequence[str | None], type_: pa.DictionaryType) -> pa.Array:
    """Dictionary-encoded strings, the dictionary in order of first appearance (as pyarrow's dictionary_encode)."""
    n, words = len(values), list(dict.fromkeys(values))
    bitmap: list[pa.Buffer | None] = [None]
    if None in words:
        words.remove(None)
        bitmap = _validity(_objects(values)[1])
    code: dict[str | None, int] = {w: i for i, w in enumerate(words)}
    code[None] = 0
    indices = np.fromiter(map(code.__getitem__, values), _NUMPY[type_.index_type], n)
    index = pa.Array.from_buffers(type_.index_type, n, [*bitmap, pa.py_buffer(indices)])
    return pa.DictionaryArray.from_arrays(index, strings(words))
