"""The event log: Parquet parts round-trip through DuckDB, a SIGKILLed run keeps what it flushed, run.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import pyarrow.parquet as pq
import pytest

from kvbench.eventlog import EVENTS, EventLog, PartWriter, read_manifest, table_glob, write_manifest
from kvbench.records import ARRIVE, ERROR, FINISH, FIRST_TOKEN, Event, Request


def test_events_round_trip_through_duckdb(tmp_path):
    log = EventLog(tmp_path)
    log.emit(Event(0, 1, ARRIVE, tokens=100))
    log.emit(Event(5_000_000, 1, FIRST_TOKEN, "prefill-0", 1, 64, "hbm"))
    log.emit(Event(9_000_000, 1, FINISH, "decode-0", 10, 64, None, None, None))
    log.emit(Event(7, 2, ERROR, detail="http_5xx: 503 Service Unavailable"))
    log.close()
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT t_ns, req_id, kind, instance, tokens, cached_tokens, tier, nbytes, detail "
            f"FROM read_parquet('{table_glob(tmp_path)}') ORDER BY req_id, t_ns"
        )
        .fetchall()
    )
    assert rows == [
        (0, 1, "ARRIVE", None, 100, None, None, None, None),
        (5_000_000, 1, "FIRST_TOKEN", "prefill-0", 1, 64, "hbm", None, None),
        (9_000_000, 1, "FINISH", "decode-0", 10, 64, None, None, None),
        (7, 2, "ERROR", None, None, None, None, None, "http_5xx: 503 Service Unavailable"),
    ]
    assert pq.read_schema(next((tmp_path / "events").glob("*.parquet"))).equals(EVENTS)


def test_realtime_parts_are_flushed_by_row_count_and_compacted_on_close(tmp_path, monkeypatch):
    import kvbench.eventlog as el

    monkeypatch.setattr(el, "FLUSH_ROWS", 10)
    monkeypatch.setattr(el, "COMPACT_OVER_PARTS", 3)
    w = PartWriter(tmp_path / "events", EVENTS, realtime=True)
    for i in range(45):  # 45 rows at 10 per part (FLUSH_ROWS), the last 5 flushed on close
        w.append(Event(i, i, ARRIVE))
        if i % 10 == 9:
            w.flush()
    assert len(w.parts) == 4  # four parts of 10 rows; 5 rows still buffered
    w.close()  # flushes the 5 and, with 5 > 3 small parts of a real-time run, merges them into one file
    files = sorted(p.name for p in (tmp_path / "events").iterdir())
    assert files == ["part-all.parquet"]
    assert duckdb.connect().execute(
        f"SELECT count(*), sum(t_ns) FROM read_parquet('{table_glob(tmp_path)}')"
    ).fetchone() == (
        45,
        990,
    )


def test_simulated_runs_keep_their_parts(tmp_path, monkeypatch):
    import kvbench.eventlog as el

    monkeypatch.setattr(el, "FLUSH_ROWS", 10)
    monkeypatch.setattr(el, "COMPACT_OVER_PARTS", 3)
    w = PartWriter(tmp_path / "events", EVENTS)  # virtual time: parts are already large, merging costs a rewrite
    for i in range(45):
        w.append(Event(i, i, ARRIVE))
        if i % 10 == 9:
            w.flush()
    w.close()
    assert len(list((tmp_path / "events").glob("part-0*.parquet"))) == 5


def test_realtime_log_flushes_on_tick_once_a_buffer_is_about_a_second_old(tmp_path):
    log = EventLog(tmp_path, realtime=True)
    log.emit(Event(0, 0, ARRIVE))
    log.tick()
    assert log.events.parts == []  # nothing is a second old yet
    log.events._last_flush_ns -= 1_100_000_000  # as if the last flush was 1.1 s ago
    log.emit(Event(1, 0, FINISH))
    log.tick()
    assert len(log.events.parts) == 1 and log.events.written == 2


def test_virtual_time_log_cuts_parts_by_rows_only_however_old_its_buffer(tmp_path):
    log = EventLog(tmp_path)  # a simulated run: its parts must not depend on how fast the machine ran it
    log.emit(Event(0, 0, ARRIVE))
    log.events._last_flush_ns -= 10_000_000_000
    log.tick()
    assert log.events.parts == [] and log.events.pending() == 1
    log.close()
    assert len(log.events.parts) == 1 and log.events.written == 1


def test_check_looks_every_check_rows_events_and_flushes_every_full_table(tmp_path, monkeypatch):
    # FLUSH_ROWS 10, CHECK_ROWS 4: check() looks at 4 and 8 events (nothing full: events 8 < 10), then at 12:
    # events (12 rows) and steps (10 rows, appended without a check of their own) are full and written;
    # requests (3 rows) stay buffered until close.
    import kvbench.eventlog as el

    monkeypatch.setattr(el, "FLUSH_ROWS", 10)
    monkeypatch.setattr(el, "CHECK_ROWS", 4)
    log = EventLog(tmp_path)
    steps = log.table("steps")
    for i in range(3):
        log.write_request(Request(i, 0, 10, 2), None)
    seen = []
    for i in range(12):
        log.emit(Event(i, i % 3, ARRIVE))
        if i < 10:
            steps.append(("decode-0", i, i + 1, 1, 1, 0, 1, 1, 10))
        log.check()
        seen.append((len(log.events.parts), len(steps.parts)))
    assert seen == [(0, 0)] * 11 + [(1, 1)]
    assert log.requests.parts == [] and log.events_logged() == 12
    log.close()
    assert (len(log.events.parts), len(steps.parts), len(log.requests.parts)) == (1, 1, 1)


def test_write_request_stores_the_static_facts_by_column(tmp_path):
    log = EventLog(tmp_path)
    log.write_request(Request(4, 7_000, 300, 20, (1, 2, 3), 128, 9, 2, reason_tokens=5, workload="chat"), 128)
    log.write_request(Request(5, 8_000, 10, 1), None)
    log.close()
    got = (
        duckdb.connect()
        .execute(f"SELECT * FROM read_parquet('{table_glob(tmp_path, 'requests')}') ORDER BY req_id")
        .fetchall()
    )
    assert got == [(4, 9, 2, 7_000, 300, 20, 5, 128, 3, 128, "chat"), (5, -1, 0, 8_000, 10, 1, 0, 512, 0, None, "")]


def test_only_side_tables_are_opened_by_name(tmp_path):
    log = EventLog(tmp_path)
    assert log.table("steps") is log.table("steps")
    for name in ("events", "requests", "stepz"):
        with pytest.raises(KeyError):
            log.table(name)


def test_sigkill_leaves_a_readable_log(tmp_path):
    """A real-time run killed with SIGKILL keeps every part flushed before the kill (>= 1 s old)."""
    script = textwrap.dedent(f"""
        import time
        from kvbench.eventlog import EventLog
        from kvbench.records import Event
        log = EventLog({str(tmp_path)!r}, realtime=True)
        i = 0
        while True:
            log.emit(Event(i, i, "ARRIVE"))
            log.tick()  # as a real-time replay does, a few times a second
            i += 1
            time.sleep(0.001)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(list((tmp_path / "events").glob("*.parquet"))) < 2:
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    n, max_id = (
        duckdb.connect().execute(f"SELECT count(*), max(req_id) FROM read_parquet('{table_glob(tmp_path)}')").fetchone()
    )
    assert n >= 2 and n == max_id + 1  # every flushed part is complete and contiguous from req 0


def test_manifest_is_written_atomically_and_read_back(tmp_path):
    write_manifest(tmp_path, {"status": "running", "seed": 3})
    write_manifest(tmp_path, {"status": "complete", "seed": 3})
    assert read_manifest(tmp_path) == {"status": "complete", "seed": 3}
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "complete"
    assert not (tmp_path / "run.json.tmp").exists()


def test_only_string_columns_get_dictionary_pages(tmp_path):
    w = PartWriter(tmp_path / "events", EVENTS)
    for i in range(100):  # 100 distinct times and ids; 2 kinds, 1 instance, 1 tier
        w.append((i, i, "ARRIVE" if i % 2 else "SEND", "decode-0", 1, None, "hbm", None, None))
    w.close()
    meta = pq.ParquetFile(w.parts[0]).metadata.row_group(0)
    dict_cols = {
        meta.column(i).path_in_schema for i in range(meta.num_columns) if "RLE_DICTIONARY" in meta.column(i).encodings
    }
    assert dict_cols == {"kind", "instance", "tier", "detail"}


def test_chunk_events_share_the_part_with_the_other_rows(tmp_path):
    # 2 full rows and 3 CHUNK 3-tuples in one flush: one part of 5 rows; the chunks read back as CHUNK events
    # with their times, ids and token counts, every other column null
    log = EventLog(tmp_path, realtime=True)
    log.emit(Event(0, 7, ARRIVE, tokens=64))
    log.emit_chunk((5, 7, 1))
    log.emit_chunk((9, 7, 2))
    log.emit(Event(3, 7, FIRST_TOKEN, tokens=1))
    log.emit_chunk((12, 7, 1))
    assert log.events.pending() == 5
    log.close()
    assert len(log.events.parts) == 1 and log.events.written == 5
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT t_ns, req_id, kind::VARCHAR, tokens, instance, cached_tokens, tier, nbytes, detail "
            f"FROM read_parquet('{table_glob(tmp_path)}') ORDER BY t_ns"
        )
        .fetchall()
    )
    assert rows == [
        (0, 7, "ARRIVE", 64, None, None, None, None, None),
        (3, 7, "FIRST_TOKEN", 1) + (None,) * 5,
        (5, 7, "CHUNK", 1) + (None,) * 5,
        (9, 7, "CHUNK", 2) + (None,) * 5,
        (12, 7, "CHUNK", 1) + (None,) * 5,
    ]


def test_chunks_alone_are_flushed_by_tick(tmp_path):
    log = EventLog(tmp_path, realtime=True)
    log.emit_chunk((1, 0, 1))
    log.tick()
    assert log.events.parts == []  # younger than a second
    log.events._last_flush_ns -= 1_100_000_000
    log.tick()
    assert len(log.events.parts) == 1 and log.events.pending() == 0 and log.events.written == 1


def test_compaction_keeps_chunk_rows(tmp_path, monkeypatch):
    import kvbench.eventlog as el

    monkeypatch.setattr(el, "COMPACT_OVER_PARTS", 3)
    log = EventLog(tmp_path, realtime=True)
    for i in range(6):  # 6 parts of one ARRIVE (5 tokens) and one CHUNK (2 tokens) each, merged on close
        log.emit(Event(i * 10, i, ARRIVE, tokens=5))
        log.emit_chunk((i * 10 + 1, i, 2))
        log.events.flush()
    log.close()
    assert [p.name for p in (tmp_path / "events").iterdir()] == ["part-all.parquet"]
    got = (
        duckdb.connect()
        .execute(
            f"SELECT kind::VARCHAR, count(*), sum(tokens) FROM read_parquet('{table_glob(tmp_path)}') GROUP BY 1 ORDER BY 1"
        )
        .fetchall()
    )
    assert got == [("ARRIVE", 6, 30), ("CHUNK", 6, 12)]


def test_columns_built_from_buffers_equal_pyarrow_conversion(tmp_path):
    import pyarrow as pa

    rows = [
        (1, 7, "SEND", None, None, None, None, None, None),
        (2, 7, "ARRIVE", "prefill-0", 12, 0, "hbm", 2**40, "héllo wörld"),
        (3, 8, "SEND", "decode-1", -5, None, None, 0, ""),
    ]
    log = EventLog(tmp_path)
    for row in rows:
        log.emit(row)
    log.close()
    got = pq.read_table(tmp_path / "events" / "part-00000.parquet")
    by_hand = [
        pa.array(col, pa.string()).dictionary_encode().cast(f.type)
        if pa.types.is_dictionary(f.type)
        else pa.array(col, f.type)
        for col, f in zip(zip(*rows), EVENTS)
    ]
    assert got.equals(pa.Table.from_arrays(by_hand, schema=EVENTS))
    assert got.column("kind").chunk(0).dictionary.to_pylist() == ["SEND", "ARRIVE"]  # first appearance


def test_writing_a_log_does_not_import_pandas(tmp_path):
    code = f"""
        import sys
        from kvbench.eventlog import EventLog
        log = EventLog({str(tmp_path)!r})
        log.emit((1, 2, "ARRIVE", None, 3, None, None, None, None))
        log.emit_chunk((2, 2, 1))
        log.table("steps").append(("e", 0, 1, 1, 1, 0, 1, 1, 10))
        log.close()
        print("pandas" in sys.modules, "pyarrow.compute" in sys.modules)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_requests_written_in_a_batch_equal_those_written_one_by_one(tmp_path):
    reqs = [
        Request(4, 7_000, 300, 20, (1, 2, 3), 128, 9, 2, reason_tokens=5, workload="chat"),
        Request(5, 8_000, 10, 1),
    ]
    one, batch = EventLog(tmp_path / "one"), EventLog(tmp_path / "batch")
    for req, reuse in zip(reqs, [128, None]):
        one.write_request(req, reuse)
    batch.write_requests(reqs, [128, None])
    assert batch.requests.rows == one.requests.rows
