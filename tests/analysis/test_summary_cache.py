"""The run's cache of derived tables (analysis/cache.py): a summary read from it equals one derived afresh, and a
changed log, SLO or threshold is never served stale files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kvbench.analysis import cache
from kvbench.analysis.runset import open_runs
from kvbench.analysis.slo import parse_slo
from kvbench.analysis.tables import prepare, side_connection
from kvbench.present import summary
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 120 requests every 20 ms on the default simulated cluster: steps, KV transfers and decode gaps
    reqs = [Request(i, i * 20 * MS, 200 + 37 * (i % 11), 4 + i % 9) for i in range(120)]
    wl = Workload("cache", "test", "0", lambda: iter(reqs), slo_ms={"ttft": 500.0})
    run_dir, stats = execute(wl, resolve("sim"), RunOptions(out=tmp_path_factory.mktemp("c") / "run"))
    assert stats.status == "complete"
    return run_dir


def _files(run_dir: Path) -> list[str]:
    folder = run_dir / cache.CACHE_DIR
    return sorted(p.name.split("-")[0] for p in folder.iterdir()) if folder.is_dir() else []


def test_a_small_log_is_not_cached(sim_run):
    summary.build(sim_run)  # the default threshold: this log is a few kB
    assert _files(sim_run) == []


def test_cached_summary_equals_the_derived_one(sim_run):
    fresh = summary.build(sim_run)
    first = summary.build(sim_run, cache_from=0)  # derives, then writes the cache
    assert _files(sim_run) == ["event_gaps", "kv_transfers", "per_request", "step_itl", "tier_hits"]
    stamps = {p.name: p.stat().st_mtime_ns for p in (sim_run / cache.CACHE_DIR).iterdir()}
    second = summary.build(sim_run, cache_from=0)  # reads it
    assert {p.name: p.stat().st_mtime_ns for p in (sim_run / cache.CACHE_DIR).iterdir()} == stamps
    assert fresh == first == second
    assert second["metrics"]["kv_transfer.count"] > 0 and second["metrics"]["itl_ms.count"] > 0


def test_another_slo_adds_its_own_slo_dependent_files_and_keeps_the_others(sim_run):
    summary.build(sim_run, cache_from=0)
    before = {p.name for p in (sim_run / cache.CACHE_DIR).iterdir()}
    slo = parse_slo("ttft=50,tpot=20")
    got = summary.build(sim_run, slo, cache_from=0)
    after = {p.name for p in (sim_run / cache.CACHE_DIR).iterdir()}
    assert got == summary.build(sim_run, slo)  # uncached
    added = after - before
    # kv_transfers does not depend on the SLO; every other table gets a file for this SLO beside the first one's,
    # so a summary with one SLO never deletes a file another summary of the run is reading
    assert before <= after and len(added) == len(before) - 1
    assert sorted(n.split("-")[0] for n in added) == sorted(n.split("-")[0] for n in before if "kv_transfers" not in n)
    assert summary.build(sim_run, cache_from=0) == summary.build(sim_run)
    assert {p.name for p in (sim_run / cache.CACHE_DIR).iterdir()} == after  # the first SLO's files served again


def test_a_rewritten_log_part_is_derived_again(sim_run, tmp_path):
    summary.build(sim_run, cache_from=0)
    key = cache.signature(sim_run, 0)
    part = next((sim_run / "events").glob("*.parquet"))
    st = part.stat()
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same bytes, a new mtime: another log for the cache
    assert cache.signature(sim_run, 0) != key
    doc = summary.build(sim_run, cache_from=0)
    assert all(key not in p.name for p in (sim_run / cache.CACHE_DIR).iterdir())  # the old key's files are gone
    assert doc == summary.build(sim_run)


def test_the_threshold_counts_event_log_bytes(sim_run):
    size = sum(p.stat().st_size for p in (sim_run / "events").glob("*.parquet"))
    assert cache.signature(sim_run, size) is not None and cache.signature(sim_run, size + 1) is None


def test_transfers_missing_from_a_cache_are_paired_again_from_the_log(sim_run):
    # per_request and the gaps come from the cache, so the connection has no request_events: kv_transfers, which
    # reads it, pivots the log itself and stores its file
    fresh = summary.build(sim_run)
    summary.build(sim_run, cache_from=0)
    for f in (sim_run / cache.CACHE_DIR).glob("kv_transfers-*.parquet"):
        f.unlink()
    again = summary.build(sim_run, cache_from=0)
    assert again == fresh and again["metrics"]["kv_transfer.count"] > 0
    assert "kv_transfers" in _files(sim_run)


def test_a_cache_that_cannot_be_written_gives_the_same_summary(sim_run, tmp_path):
    # RUN/.cache is a file: no table can be stored, so per_request (written straight to its cache file otherwise)
    # is built as a table, and the samples and time series are read on the summary's own connection
    run = tmp_path / "run"
    shutil.copytree(sim_run, run, ignore=shutil.ignore_patterns(cache.CACHE_DIR))
    (run / cache.CACHE_DIR).write_text("not a folder")
    assert summary.build(run, cache_from=0) == summary.build(run)
    assert (run / cache.CACHE_DIR).read_text() == "not a folder"


def test_a_side_connection_reads_the_cache_files_and_only_those(sim_run):
    slo = parse_slo("ttft=500")
    con = open_runs([sim_run])
    try:
        prepare(con, slo)
        assert side_connection(con, slo) is None  # no cache: per_request is this connection's own table
        cache.enable(con, sim_run, 0)
        summary.build(sim_run, slo, cache_from=0)  # writes the files for this SLO
        side = side_connection(con, slo)
        assert side is not None
        query = "SELECT count(*), sum(ttft_ns), count(*) FILTER (WHERE good) FROM per_request"
        assert side.execute(query).fetchall() == con.execute(query).fetchall()
        side.close()
    finally:
        con.close()
