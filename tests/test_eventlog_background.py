"""A simulated run's event log writes its parts on a thread (eventlog.Background): same files, failures raised."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
import pytest

from kvbench.eventlog import EVENTS, Background, EventLog, PartWriter, table_parts
from kvbench.records import ARRIVE, Event


def _fill(log: EventLog, n: int) -> None:
    for i in range(n):
        log.emit(Event(i, i, ARRIVE, tokens=i))
        log.check()


def test_a_simulated_log_writes_its_parts_on_a_thread_and_close_waits_for_them(tmp_path, monkeypatch):
    import kvbench.eventlog as el

    monkeypatch.setattr(el, "FLUSH_ROWS", 10)
    monkeypatch.setattr(el, "CHECK_ROWS", 5)
    log = EventLog(tmp_path)
    assert log._background is not None and EventLog(tmp_path / "rt", realtime=True)._background is None
    _fill(log, 45)  # parts of 10 rows at 10, 20, 30, 40 events; 5 rows on close
    log.close()
    assert [p.name for p in log.events.parts] == [f"part-{k:05d}.parquet" for k in range(5)]
    assert table_parts(tmp_path) == [str(p) for p in log.events.parts]  # renamed into place, no .tmp left
    assert not list((tmp_path / "events").glob("*.tmp"))
    got = duckdb.connect().execute(
        "SELECT count(*), sum(t_ns), sum(tokens) FROM read_parquet(?)", [table_parts(tmp_path)]
    )
    assert got.fetchone() == (45, 990, 990)
    first = pq.read_table(log.events.parts[0])
    assert first.schema.equals(EVENTS) and first.column("t_ns").to_pylist() == list(range(10))  # row order kept


def test_a_failed_background_write_is_raised_in_the_callers_thread(tmp_path):
    w = PartWriter(tmp_path / "events", EVENTS, background=Background())
    w.append(Event(0, 0, ARRIVE))
    w.dir.rmdir()  # the part's directory is gone: the write on the thread fails
    w.flush()  # returns at once; the failure is the thread's
    w.append(Event(1, 0, ARRIVE))
    with pytest.raises(FileNotFoundError):
        w.flush()  # the next write waits for the one in flight and raises its failure
    background = Background()
    background.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        background.wait()
    background.wait()  # raised once
