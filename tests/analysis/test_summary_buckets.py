"""summary.json's time series: buckets of the asked width, widened to a whole multiple of it for long runs."""

from __future__ import annotations

import duckdb
import pytest

from kvbench.present.summary import MAX_BUCKETS, series_bucket_s

S = 1_000_000_000


def _con(*rows: tuple[int, int | None, bool]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE per_request (arrival_ns BIGINT, end_ns BIGINT, interrupted_unsent BOOLEAN)")
    for row in rows:
        con.execute("INSERT INTO per_request VALUES (?, ?, ?)", list(row))
    return con


def test_a_run_of_max_buckets_keeps_the_asked_width():
    # buckets 0 .. 3599 of 1 s: 3,600 exactly
    assert MAX_BUCKETS == 3_600
    assert series_bucket_s(_con((0, 3_599 * S + 999, False)), 1.0) == 1.0


def test_one_bucket_more_doubles_the_width():
    # buckets 0 .. 3600 of 1 s are 3,601; of 2 s, 0 .. 1800: 1,801
    assert series_bucket_s(_con((0, 3_600 * S, False)), 1.0) == 2.0


@pytest.mark.parametrize(("bucket_s", "width"), [(1.0, 14.0), (2.0, 14.0), (0.5, 14.0), (100.0, 100.0)])
def test_a_long_run_gets_the_smallest_multiple_within_max_buckets(bucket_s, width):
    # 49,990 s: 13 s buckets would be 3,846 (0 .. 3845), 14 s buckets 3,571
    con = _con((0, None, False), (10 * S, 49_990 * S, False))
    assert series_bucket_s(con, bucket_s) == width


def test_unsent_interrupted_requests_do_not_stretch_the_span():
    # the series leaves them out (timeseries.sql), so their intended arrivals do not widen the buckets
    assert series_bucket_s(_con((0, 10 * S, False), (90_000 * S, None, True)), 1.0) == 1.0


def test_an_empty_run_keeps_the_asked_width():
    assert series_bucket_s(_con(), 1.0) == 1.0
