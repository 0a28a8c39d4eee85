"""The per-request parts the event log writes beside its events parts (kvbench/requestparts.py), by hand."""

from __future__ import annotations

import pyarrow.parquet as pq

from kvbench import eventlog, requestparts
from kvbench.eventlog import EventLog

NONE9 = (None,) * 9


def _event(t, req, kind, instance=None, tokens=None, cached=None, tier=None, nbytes=None, detail=None) -> tuple:
    return (t, req, kind, instance, tokens, cached, tier, nbytes, detail)


def _rows(path) -> dict[int, dict]:
    return {row["req_id"]: row for row in pq.read_table(path).to_pylist()}


def test_one_row_per_request_of_a_part_with_each_aggregate(tmp_path):
    log = EventLog(tmp_path)
    for e in [
        _event(10, 1, "ARRIVE", tokens=100),
        _event(11, 1, "SEND"),
        _event(12, 1, "PREFILL_START", "p1"),
        _event(13, 1, "PREFILL_START", "p0"),  # a second one: the first time, the smallest instance
        _event(20, 1, "KV_XFER_START", "p0", tier="rdma", nbytes=64, detail="to d0 layerwise_from_ns=15"),
        _event(25, 1, "KV_XFER_END", "d0", nbytes=80),
        _event(26, 1, "DECODE_START", "d0"),
        _event(27, 1, "FIRST_TOKEN", "d0", tokens=1, cached=32),
        _event(28, 2, "ARRIVE", tokens=7),
        _event(29, 2, "PREEMPT", "d0"),
        _event(30, 2, "REJECT", detail="queue_full: too many"),
    ]:
        log.emit(e)
    log.emit_chunk((31, 1, 2))
    log.emit_chunk((32, 1, 3))
    log.close()
    rows = _rows(tmp_path / requestparts.DIR / "part-00000.parquet")
    one, two = rows[1], rows[2]
    assert (one["arrive_ns"], one["arrive_tokens"], one["send_ns"], one["route_ns"]) == (10, 100, 11, None)
    assert (one["prefill_start_ns"], one["prefill_instance"]) == (12, "p0")
    assert (one["decode_start_ns"], one["decode_instance"], one["first_ns"], one["first_instance"]) == (
        26,
        "d0",
        27,
        "d0",
    )
    assert (one["last_ns"], one["end_ns"], one["status"], one["detail"]) == (None, None, None, None)
    assert (one["out_max"], one["out_sum"], one["n_chunks"], one["cached_tokens"]) == (None, 1 + 2 + 3, 2, 32)
    assert (one["preemptions"], one["migrations"], one["last_event_ns"]) == (0, 0, 32)
    assert (one["kv_starts"], one["kv_start_ns"], one["kv_wire_ns"], one["kv_tier"]) == (1, 20, 15, "rdma")
    assert (one["kv_nbytes"], one["kv_instance"]) == (64, "p0")
    assert (one["kv_ends"], one["kv_end_ns"], one["kv_end_nbytes"]) == (1, 25, 80)
    assert (two["end_ns"], two["status"], two["detail"], two["preemptions"]) == (
        30,
        "REJECT",
        "queue_full: too many",
        1,
    )
    assert (two["out_max"], two["out_sum"], two["n_chunks"], two["kv_starts"], two["kv_wire_ns"]) == (
        None,
        None,
        0,
        0,
        None,
    )


def test_a_request_over_two_parts_has_a_row_in_each(tmp_path):
    log = EventLog(tmp_path)
    log.emit(_event(10, 5, "ARRIVE", tokens=9))
    log.emit(_event(12, 5, "FIRST_TOKEN", "d0", tokens=1))
    log.events.flush()
    log.emit(_event(20, 5, "LAST_TOKEN", "d0", tokens=4))
    log.emit(_event(20, 5, "FINISH", "d0", tokens=4, detail="ok"))
    log.close()
    first = _rows(tmp_path / requestparts.DIR / "part-00000.parquet")[5]
    second = _rows(tmp_path / requestparts.DIR / "part-00001.parquet")[5]
    assert (first["arrive_ns"], first["first_ns"], first["out_sum"], first["status"], first["last_event_ns"]) == (
        10, 12, 1, None, 12,
    )  # fmt: skip
    assert (second["arrive_ns"], second["last_ns"], second["out_max"], second["status"], second["detail"]) == (
        None, 20, 4, "FINISH", "ok",
    )  # fmt: skip


def test_the_wire_start_is_read_as_kv_transfers_sql_reads_it(tmp_path):
    log = EventLog(tmp_path)
    details = {
        1: "layerwise_from_ns=7;x",  # digits then not a space: 7
        2: "layerwise_from_ns=x layerwise_from_ns=9",  # the first has no digits: the second's
        3: None,  # no detail: the START's time
        4: "layerwise_from_ns=99999999999999999999",  # beyond 64 bits: the START's time, as TRY_CAST
    }
    for req, detail in details.items():
        log.emit(_event(100 + req, req, "KV_XFER_START", "p0", tier="rdma", nbytes=1, detail=detail))
    log.close()
    rows = _rows(tmp_path / requestparts.DIR / "part-00000.parquet")
    assert {req: row["kv_wire_ns"] for req, row in rows.items()} == {1: 7, 2: 9, 3: 103, 4: 104}


def test_compaction_merges_the_per_request_parts_too(tmp_path, monkeypatch):
    monkeypatch.setattr(eventlog, "COMPACT_OVER_PARTS", 2)
    log = EventLog(tmp_path, realtime=True)
    for i in range(3):  # three parts, each with an event of request 1 and one of its own request
        log.emit(_event(10 * i, 1, "CHUNK" if i else "ARRIVE", tokens=i + 1))
        log.emit(_event(10 * i + 1, 10 + i, "ARRIVE", tokens=5))
        log.events.flush()
    log.close()
    assert [p.name for p in (tmp_path / "events").glob("*.parquet")] == ["part-all.parquet"]
    assert [p.name for p in (tmp_path / requestparts.DIR).glob("*.parquet")] == ["part-all.parquet"]
    rows = pq.read_table(tmp_path / requestparts.DIR / "part-all.parquet").to_pylist()
    assert sorted((r["req_id"], r["last_event_ns"], r["n_chunks"]) for r in rows) == [
        (1, 0, 0), (1, 10, 1), (1, 20, 1), (10, 1, 0), (11, 11, 0), (12, 21, 0),
    ]  # fmt: skip


def test_compaction_after_a_part_was_left_out_keeps_the_events_and_leaves_no_merged_part(tmp_path, monkeypatch):
    monkeypatch.setattr(eventlog, "COMPACT_OVER_PARTS", 2)
    log = EventLog(tmp_path, realtime=True)
    for i in range(3):
        log.emit(_event(10 * i, i, "ARRIVE", tokens=5))
        log.events.flush()
        if i == 1:  # as when its write failed (disk full): requestparts.write leaves it out
            (tmp_path / requestparts.DIR / "part-00001.parquet").unlink()
    log.close()
    assert [p.name for p in (tmp_path / "events").glob("*.parquet")] == ["part-all.parquet"]
    assert pq.read_table(tmp_path / "events" / "part-all.parquet").num_rows == 3
    assert list((tmp_path / requestparts.DIR).glob("*")) == []  # the summary pivots the events


def test_rebuild_writes_the_missing_parts_only(tmp_path):
    log = EventLog(tmp_path)
    log.emit(_event(1, 1, "ARRIVE", tokens=3))
    log.events.flush()
    log.emit(_event(2, 2, "ARRIVE", tokens=4))
    log.close()
    parts = sorted((tmp_path / requestparts.DIR).glob("*.parquet"))
    kept = parts[0].read_bytes()
    parts[1].unlink()
    assert requestparts.rebuild(tmp_path) == 1
    assert parts[0].read_bytes() == kept
    assert _rows(parts[1])[2]["arrive_tokens"] == 4


def test_distinct_rows_by_hash_equal_the_sorted_ones():
    import numpy as np

    from kvbench.requestparts import _distinct_rows, _sorted_rows

    rng = np.random.default_rng(1)
    padded = rng.integers(0, 3, (500, 4)).astype(np.uint8)  # 81 possible rows, most repeated
    distinct, inverse = _distinct_rows(padded)
    assert np.array_equal(distinct[inverse], padded) and len(distinct) == len(_sorted_rows(padded)[0])


def test_wire_starts_are_read_from_each_detail_alone():
    import numpy as np
    import pyarrow as pa

    from kvbench.requestparts import _wire_ns

    details = [
        "to decode-0 layerwise_from_ns=12",  # a START
        "34 layerwise_from_ns=5",  # not a START; its leading digits must not extend the one before
        None,
        "layerwise_from_ns=7 layerwise_from_ns=8",  # the first one counts
        "to decode-1",  # a START without one: its own t_ns
        f"layerwise_from_ns={2**63}",  # past 64 bits: its own t_ns
        "layerwise_from_ns=",
    ]
    t_ns = np.arange(100, 100 + len(details), dtype=np.int64)
    starts = np.array([0, 3, 4, 5, 6])
    got = _wire_ns(pa.array(details, pa.string()), starts, t_ns)
    assert got.tolist() == [12, 101, 102, 7, 104, 105, 106]
    clean = ["layerwise_from_ns=9 x", None, "y layerwise_from_ns=10"]
    assert _wire_ns(pa.array(clean, pa.string()), np.array([0, 2]), np.zeros(3, np.int64)).tolist() == [9, 0, 10]
