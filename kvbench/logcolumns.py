"""Arrow tables from buffered row tuples: each column built from numpy buffers in a few C passes, no pandas."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from itertools import compress, repeat
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
_NOT_NUMBERS = (TypeError, ValueError, OverflowError)
_PRESENT = {None: 0}  # .get(value, 1): 0 for a null, 1 for a value


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
        obj, valid = _objects(values)
        obj[~valid] = 0
        return pa.Array.from_buffers(type_, n, [*_validity(valid), pa.py_buffer(obj.astype(dtype))])
    try:  # one pass when no value is null (times, ids)
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.fromiter(values, dtype, n))])
    except _NOT_NUMBERS:
        return _nullable_ints(values, type_)


def _nullable_ints(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Integers with nulls: where they are present (one C pass: 1 per value, 0 per None), then only the present
    values converted (most of a log's optional columns are null on most rows). A value the column's type does not
    hold raises as numpy's conversion does (OverflowError, TypeError)."""
    n, dtype = len(values), _NUMPY[type_]
    present = bytes(map(_PRESENT.get, values, repeat(1)))
    valid = np.frombuffer(present, np.bool_)
    data = np.zeros(n, dtype)
    data[valid] = np.fromiter(compress(values, present), dtype, n - present.count(0))
    return pa.Array.from_buffers(type_, n, [*_validity(valid), pa.py_buffer(data)])


def _objects(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The values as an object array, and where they are not None (one C loop each)."""
    obj = np.array(values, dtype=object)
    return obj, obj != None  # noqa: E711  (elementwise on an object array, not an identity test)


def _validity(valid: np.ndarray) -> list[pa.Buffer]:
    return [pa.py_buffer(np.packbits(valid, bitorder="little"))]


class _Codes(dict):
    """value -> its code, numbered in order of first appearance as the values are looked up."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


def _codes(values: Sequence[Any]) -> tuple[np.ndarray, dict[Any, int]]:
    """Each value's code, numbered in order of first appearance, and the codes of the distinct values. One C pass
    into bytes while there are at most 256 distinct values (a log's instance, tier and kind columns); past that
    (details) the pass stops and the distinct values are found first instead, without a Python call per value."""
    codes = _Codes()
    try:
        return np.frombuffer(bytes(map(codes.__getitem__, values)), np.uint8), codes
    except ValueError:
        distinct = dict.fromkeys(values)
        found = dict(zip(distinct, range(len(distinct))))
        return np.fromiter(map(found.__getitem__, values), np.int32, len(values)), found


def strings(values: Sequence[str | None]) -> pa.Array:
    """A string array. Each distinct value (few in a log's columns: instance, tier, kind of detail) is encoded
    once; the rows are then its code, and their offsets and bytes are gathered by numpy from the codes."""
    n = len(values)
    codes, code = _codes(values)
    words = [b"" if w is None else w.encode() for w in code]
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    offsets = np.zeros(n + 1, np.int32)  # a part holds at most FLUSH_ROWS rows of short strings: int32 offsets
    np.cumsum(lengths[codes], out=offsets[1:])
    starts = np.zeros(len(words), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    sizes = np.diff(offsets)
    # byte j of row i is byte j - offsets[i] of its word, which begins at starts[codes[i]] in the joined words
    at = np.repeat(starts[codes] - offsets[:-1], sizes) + np.arange(offsets[-1])
    data = np.frombuffer(b"".join(words), np.uint8)[at] if len(at) else np.zeros(0, np.uint8)
    bitmap = _validity(codes != code[None]) if None in code else [None]
    return pa.Array.from_buffers(pa.string(), n, [*bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


def dictionary(values: Sequence[str | None], type_: pa.DictionaryType) -> pa.Array:
    """Dictionary-encoded strings, the dictionary in order of first appearance (as pyarrow's dictionary_encode)."""
    n = len(values)
    codes, code = _codes(values)
    words = list(code)
    bitmap: list[pa.Buffer | None] = [None]
    if None in code:  # the dictionary holds no null: codes after None's own move down by one
        none = code[None]
        words.remove(None)
        valid = codes != none
        bitmap = _validity(valid)
        codes = np.where(valid, codes - (codes > none), 0)
    indices = codes.astype(_NUMPY[type_.index_type])
    index = pa.Array.from_buffers(type_.index_type, n, [*bitmap, pa.py_buffer(indices)])
    return pa.DictionaryArray.from_arrays(index, strings(words))
