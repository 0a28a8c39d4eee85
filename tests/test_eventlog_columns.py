"""kvbench.logcolumns: columns built from numpy buffers equal pyarrow's own conversion of the same values."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from kvbench.eventlog import EVENTS, STEPS
from kvbench.logcolumns import column, strings, to_table


@pytest.mark.parametrize(
    "values, type_",
    [
        ((1, 2, 3), pa.int64()),
        ((None, 5, None, -7), pa.int32()),
        ((2**53, None, -(2**53)), pa.int64()),
        ((2**53 + 1, None, 3), pa.int64()),  # beyond float64's exact integers: the object path keeps it exact
        ((2**62, None), pa.int64()),
        ((None, None), pa.int32()),
        ((2**31 - 1, None, -(2**31)), pa.int32()),
        ((1.5, None, -2.25), pa.float64()),
    ],
)
def test_numbers_equal_pyarrow(values, type_):
    got = column(values, type_)
    assert got.equals(pa.array(values, type_, from_pandas=False))
    assert got.null_count == values.count(None)


def test_a_float_column_keeps_nan_as_a_value_and_none_as_null():
    got = column((float("nan"), None, 2.0), pa.float64()).to_pylist()
    assert math.isnan(got[0]) and got[1:] == [None, 2.0]


def test_an_integer_out_of_the_columns_range_is_refused_as_before():
    with pytest.raises(OverflowError):
        column((None, 2**31), pa.int32())
    with pytest.raises(OverflowError):
        column((2**31, 1), pa.int32())


@pytest.mark.parametrize(
    "values",
    [
        ("a", "bb", "a", "ccc"),
        (None, "prefill-0", None, "decode-1", "prefill-0"),
        ("héllo wörld", "", None, "héllo wörld", "✓"),
        (None, None),
        ("", ""),
    ],
)
def test_strings_equal_pyarrow(values):
    got = strings(values)
    assert got.equals(pa.array(values, pa.string()))
    assert got.to_pylist() == list(values)


def test_a_table_of_rows_reads_back_row_by_row():
    rows = [
        (0, 1, "ARRIVE", None, 12, None, None, None, None),
        (5, 1, "ROUTE", "prefill-0", None, None, None, None, "decode-0"),
        (9, 2, "KV_XFER_END", "decode-0", 12, None, "nvlink", 2**40, None),
    ]
    table = to_table(rows, EVENTS)
    assert [tuple(r.values()) for r in table.to_pylist()] == rows
    steps = [("prefill-0", 0, 10, 1, 2, 24, 0, 3, 100), ("decode-0", 10, 20, 4, 1, 0, 4, 5, 100)]
    assert [tuple(r.values()) for r in to_table(steps, STEPS).to_pylist()] == steps


@pytest.mark.parametrize(
    "values",
    [
        ("ARRIVE", "SEND", "ARRIVE", "FINISH"),
        (None, "ROUTE", None, "SEND", "ROUTE"),
        ("SEND", None),
    ],
)
def test_dictionaries_equal_pyarrow(values):
    type_ = EVENTS.field("kind").type
    got = column(values, type_)
    assert got.equals(pa.array(values, pa.string()).dictionary_encode().cast(type_))
    assert got.to_pylist() == list(values)


def test_strings_past_256_distinct_values_keep_their_order():
    values = tuple(f"layerwise_from_ns={i}" if i % 3 else None for i in range(1_000))
    got = strings(values)
    assert got.equals(pa.array(values, pa.string()))


def test_integers_of_an_optional_column_are_kept_exact_where_present():
    values = (None, 2**62 + 1, None, -(2**63), 7, None)
    got = column(values, pa.int64())
    assert got.to_pylist() == list(values) and got.null_count == 3
