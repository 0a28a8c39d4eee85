"""`kvbench sql`: the table view over results holding SQL NULLs (pandas NA, NaN, None), CSV and JSON."""

from __future__ import annotations

import json

import pytest
from support.metrics_logs import real_run

from kvbench.analysis.sqlquery import run_query


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return real_run(tmp_path_factory.mktemp("q") / "real")


def _rows(text: str) -> dict[str, list[str]]:
    """Table body rows of rich's output, keyed by the first cell, cells stripped."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and cells[0].isdigit():
            out[cells[0]] = cells[1:]
    return out


def test_table_view_shows_nulls_as_empty_cells(real, capsys):
    # first_ns is a nullable BIGINT (pandas Int64: NULL is pd.NA), tpot_ns a DOUBLE (NULL is NaN), reason a
    # VARCHAR (None). Request 0 finished (first 100 ms, TPOT (160 - 100) / 3 = 20 ms), request 2 errored before
    # any token (no first_ns, no TPOT, reason server_error), request 1 has one token (no TPOT).
    run_query(
        [real],
        "SELECT req_id, first_ns // 1000000 AS first_ms, tpot_ns / 1e6 AS tpot_ms, reason "
        "FROM per_request WHERE req_id IN (0, 1, 2) ORDER BY req_id",
    )
    rows = _rows(capsys.readouterr().out)
    assert rows == {"0": ["100", "20.0", ""], "1": ["250", "", ""], "2": ["", "", "server_error"]}


def test_table_view_list_column_and_csv_json_agree(real, capsys):
    run_query([real], "SELECT 7 AS id, [1, 2] AS l, NULL::TIMESTAMP AS ts, NULL::INTEGER AS i")
    assert _rows(capsys.readouterr().out) == {"7": ["[1 2]", "", ""]}
    run_query([real], "SELECT req_id, cached_tokens FROM per_request WHERE req_id IN (0, 2) ORDER BY req_id", "csv")
    assert capsys.readouterr().out.splitlines() == ["req_id,cached_tokens", "0,512", "2,"]
    run_query([real], "SELECT req_id, cached_tokens FROM per_request WHERE req_id IN (0, 2) ORDER BY req_id", "json")
    assert json.loads(capsys.readouterr().out) == [
        {"req_id": 0, "cached_tokens": 512},
        {"req_id": 2, "cached_tokens": None},
    ]
