"""The summary's per-request rows from the per-request parts (requestparts.py, request_parts.sql): the same
request_events, KV transfers and summary as pivoting the events, and the fallback to the pivot whenever the parts
do not match the events parts one to one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbench import eventlog, requestparts
from kvbench.analysis.runset import open_runs, request_parts
from kvbench.analysis.sqlfiles import sql_text
from kvbench.analysis.tables import build_kv_transfers
from kvbench.present import summary

KV_COLUMNS = "kv_starts, kv_start_ns, kv_wire_ns, kv_tier, kv_nbytes, kv_instance, kv_ends, kv_end_ns, kv_end_nbytes"


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory, conversation_trace: Path) -> Path:
    """A simulator replay whose log is cut into parts of 2,000 events, so that many requests span two parts."""
    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload import load

    wl = load.shape(load.select(conversation_trace, None), max_requests=600)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eventlog, "FLUSH_ROWS", 2000)
        mp.setattr(eventlog, "CHECK_ROWS", 500)
        run_dir, _ = execute(wl, resolve("sim:pd-2p2d"), RunOptions(out=tmp_path_factory.mktemp("rp") / "sim"))
    return run_dir


def _without_parts(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run_dir.name  # the same name: the `run` column and summary.json's run name match
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(requestparts.DIR, "summary.json", ".cache"))
    return copy


def _rows(con, query: str) -> list[tuple]:
    return sorted(con.execute(query).fetchall(), key=repr)


def test_every_events_part_has_its_per_request_part(sim_run):
    events = sorted(p.name for p in (sim_run / "events").glob("*.parquet"))
    assert len(events) > 3
    assert request_parts(sim_run) == [str(sim_run / requestparts.DIR / name) for name in events]


def test_merged_rows_equal_the_pivot_of_the_events(sim_run):
    con = open_runs([sim_run])
    con.execute(sql_text("request_parts"))
    merged = _rows(con, f"SELECT * EXCLUDE ({KV_COLUMNS}) FROM request_events")
    spans = con.execute("SELECT count(*) FROM (SELECT req_id FROM request_parts GROUP BY ALL HAVING count(*) > 1)")
    spanning = spans.fetchall()[0][0]
    several = con.execute("SELECT count(*) FROM request_events WHERE kv_starts > 1 OR kv_ends > 1").fetchall()
    con.execute(sql_text("request_events"))
    assert merged == _rows(con, "SELECT * FROM request_events")
    assert len(merged) == 600 and spanning > 50  # many requests merged from two parts
    assert several[0][0] > 0  # and some with two KV transfers, paired from the events


def test_kv_transfers_from_merged_rows_equal_those_paired_from_the_events(sim_run, tmp_path):
    con = open_runs([sim_run])
    build_kv_transfers(con)
    old = open_runs([_without_parts(sim_run, tmp_path)])
    build_kv_transfers(old)
    query = "SELECT * FROM kv_transfers"
    assert _rows(con, query) == _rows(old, query)
    assert len(_rows(con, query)) > 600


def test_summary_is_byte_identical_with_and_without_the_parts(sim_run, tmp_path):
    with_parts, without = summary.build(sim_run), summary.build(_without_parts(sim_run, tmp_path))
    assert with_parts.pop("run_dir") != without.pop("run_dir")  # the one difference: where the run is
    assert summary.dumps(with_parts) == summary.dumps(without)


def _has_view(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'request_parts'").fetchall()[0][0])


def test_a_run_without_parts_is_pivoted(sim_run, tmp_path):
    copy = _without_parts(sim_run, tmp_path)  # written before per-request parts, or by another tool
    assert request_parts(copy) is None and not _has_view(open_runs([copy]))


def test_a_missing_part_falls_back_to_the_pivot(sim_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(sim_run, copy)
    sorted((copy / requestparts.DIR).glob("*.parquet"))[-1].unlink()  # killed between the two writes
    assert request_parts(copy) is None and not _has_view(open_runs([copy]))


def test_an_extra_part_falls_back_to_the_pivot(sim_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(sim_run, copy)
    sorted((copy / "events").glob("*.parquet"))[0].unlink()  # an events part gone, its per-request part left
    assert request_parts(copy) is None and not _has_view(open_runs([copy]))


def test_a_foreign_or_broken_part_falls_back_to_the_pivot(sim_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(sim_run, copy)
    first = sorted((copy / requestparts.DIR).glob("*.parquet"))[0]
    first.write_bytes(b"not parquet")
    assert request_parts(copy) is None and not _has_view(open_runs([copy]))
    shutil.copy(sorted((copy / "events").glob("*.parquet"))[0], first)  # a Parquet file of other columns
    assert request_parts(copy) is None


def test_two_runs_use_the_parts_only_when_both_have_them(sim_run, tmp_path):
    copy = _without_parts(sim_run, tmp_path / "old")
    other = tmp_path / "new" / "other"
    shutil.copytree(sim_run, other)
    assert _has_view(open_runs([sim_run, other]))
    assert not _has_view(open_runs([sim_run, copy]))
