"""The replayer against the fixed-latency target: open and closed loop, sessions, interrupts, hand-computed times."""

from __future__ import annotations

import duckdb
import pytest

from kvbench.eventlog import EventLog, table_glob
from kvbench.records import Request
from kvbench.replayer import Replayer
from kvbench.target import RunContext
from kvbench.targets import build, resolve

MS = 1_000_000


def _run(tmp_path, reqs, target="fixed:ttft_ms=50,itl_ms=10,servers=1", concurrency=None, progress=None, **closed):
    log = EventLog(tmp_path)
    tgt = build(resolve(target), RunContext(0, tmp_path, log))
    stats = Replayer(tgt, log, concurrency, progress=progress, **closed).run(iter(reqs))
    log.close()
    return stats


def _times(tmp_path, kind):
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, t_ns FROM read_parquet('{table_glob(tmp_path)}') WHERE kind = ? ORDER BY req_id", [kind]
        )
        .fetchall()
    )
    return {r: t // MS for r, t in rows}


def test_open_loop_fifo_queue_times_by_hand(tmp_path):
    # One server; service = ttft 50 + itl 10 x (3 - 1) = 70 ms.
    # r0 arrives 0: 0..70 (first token 50). r1 arrives 0: waits, 70..140 (first 120). r2 arrives 100: 140..210 (first 190).
    reqs = [Request(0, 0, 10, 3), Request(1, 0, 10, 3), Request(2, 100 * MS, 10, 3)]
    stats = _run(tmp_path, reqs)
    assert (stats.status, stats.submitted, stats.finished) == ("complete", 3, 3)
    assert _times(tmp_path, "ARRIVE") == {0: 0, 1: 0, 2: 100}
    assert _times(tmp_path, "FIRST_TOKEN") == {0: 50, 1: 120, 2: 190}
    assert _times(tmp_path, "FINISH") == {0: 70, 1: 140, 2: 210}


def test_closed_loop_releases_when_a_slot_frees(tmp_path):
    # Unlimited servers but concurrency 1: r1's intended release is r0's end (70), r2 (due at 100) waits for r1 (140).
    reqs = [Request(0, 0, 10, 3), Request(1, 0, 10, 3), Request(2, 100 * MS, 10, 3)]
    _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=0", concurrency=1)
    assert _times(tmp_path, "ARRIVE") == {0: 0, 1: 70, 2: 140}
    assert _times(tmp_path, "FINISH") == {0: 70, 1: 140, 2: 210}


def test_closed_loop_users_ignore_arrival_times_and_think(tmp_path):
    # 2 users, think 30 ms, service 70 ms: r0, r1 at 0 (the opening, though r1 is due at 500 ms); each end + 30 ms
    # releases the next: r2 and r3 at 100; r4 at 200 (r2's end 170 + 30).
    reqs = [Request(i, t * MS, 10, 3) for i, t in enumerate([0, 500, 600, 700, 800])]
    stats = _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=0", 2, closed=True, think_ns=30 * MS)
    assert _times(tmp_path, "ARRIVE") == {0: 0, 1: 0, 2: 100, 3: 100, 4: 200}
    assert _times(tmp_path, "FINISH") == {0: 70, 1: 70, 2: 170, 3: 170, 4: 270}
    assert stats.finished == 5 and stats.in_flight == 0 and stats.outstanding == 0


def test_in_flight_counts_sent_requests_not_scheduled_ones(tmp_path):
    # One server; r0 at 0, r1..r3 scheduled at 1 s: while r0 runs, 4 are submitted but only r0 is sent.
    seen = []
    reqs = [Request(0, 0, 10, 3)] + [Request(i, 1000 * MS, 10, 3) for i in (1, 2, 3)]
    _run(tmp_path, reqs, progress=lambda st: seen.append((st.ended, st.in_flight, st.outstanding)))
    assert seen[-1] == (4, 0, 0)
    assert max(f for _, f, _ in seen) <= 3 and all(f <= o for _, f, o in seen)


def test_closed_loop_needs_users(tmp_path):
    with pytest.raises(ValueError, match="number of users"):
        _run(tmp_path, [Request(0, 0, 10, 3)], closed=True)


def test_session_turn_waits_for_previous_finish_plus_think_time(tmp_path):
    # Session 5: turn 0 at 0 ends at 70; turn 1 (nominal arrival 10 ms, think 1 s) is released at 70 + 1000 = 1070.
    reqs = [
        Request(0, 0, 10, 3, session_id=5, turn=0),
        Request(1, 10 * MS, 20, 3, session_id=5, turn=1, think_ns=1000 * MS),
        Request(2, 20 * MS, 10, 3),
    ]
    _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=0")
    assert _times(tmp_path, "ARRIVE") == {0: 0, 1: 1070, 2: 20}
    assert _times(tmp_path, "FINISH") == {0: 70, 1: 1140, 2: 90}
    arrivals = dict(
        duckdb.connect()
        .execute(f"SELECT req_id, arrival_ns // {MS} FROM read_parquet('{table_glob(tmp_path, 'requests')}')")
        .fetchall()
    )
    assert arrivals == {0: 0, 1: 1070, 2: 20}


def test_a_stream_that_starts_mid_session_releases_its_first_turn_seen_on_time(tmp_path):
    # Session 3's turn 0 is not in the stream (cut off by a window): turn 1 goes at its own arrival (40 ms),
    # ends at 40 + 70 = 110; turn 2 (think 5 ms) follows at 115 and ends at 185.
    reqs = [
        Request(1, 40 * MS, 10, 3, session_id=3, turn=1, think_ns=5 * MS),
        Request(2, 60 * MS, 10, 3, session_id=3, turn=2, think_ns=5 * MS),
    ]
    stats = _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=0")
    assert (stats.status, stats.finished) == ("complete", 2)
    assert _times(tmp_path, "ARRIVE") == {1: 40, 2: 115}
    assert _times(tmp_path, "FINISH") == {1: 110, 2: 185}


def test_failed_turn_cancels_the_rest_of_its_session(tmp_path):
    # fail_every=1: every released request errors, so turn 1 of session 9 is cancelled, never sent.
    reqs = [Request(0, 0, 10, 3, session_id=9, turn=0), Request(1, MS, 10, 3, session_id=9, turn=1)]
    stats = _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=0,fail_every=1")
    assert (stats.errors, stats.cancelled, stats.finished) == (1, 1, 0)
    kinds = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, list(kind ORDER BY t_ns) FROM read_parquet('{table_glob(tmp_path)}') "
            f"GROUP BY req_id ORDER BY req_id"
        )
        .fetchall()
    )
    assert kinds == [(0, ["ARRIVE", "SEND", "ERROR"]), (1, ["CANCEL"])]


def test_every_request_ends_exactly_once_and_trace_reuse_is_recorded(tmp_path):
    # Blocks: r0 [1,2], r1 [1,3] reuses 1 block (512 tokens), r2 [1,2,4] reuses 2 (capped at input 1000).
    reqs = [Request(0, 0, 1000, 2, (1, 2)), Request(1, MS, 1000, 2, (1, 3)), Request(2, 2 * MS, 1000, 2, (1, 2, 4))]
    _run(tmp_path, reqs, "fixed:ttft_ms=1,itl_ms=1,servers=2,fail_every=2")
    ends = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, count(*) FROM read_parquet('{table_glob(tmp_path)}') "
            f"WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL') GROUP BY 1 ORDER BY 1"
        )
        .fetchall()
    )
    assert ends == [(0, 1), (1, 1), (2, 1)]
    reuse = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, trace_reuse_tokens FROM read_parquet('{table_glob(tmp_path, 'requests')}') ORDER BY 1"
        )
        .fetchall()
    )
    assert reuse == [(0, 0), (1, 512), (2, 1000)]


def test_interrupt_cancels_in_flight_and_keeps_what_was_measured(tmp_path):
    calls = []

    def progress(stats):
        calls.append(stats.events)
        if stats.ended >= 10 and stats.status == "running":
            raise KeyboardInterrupt

    reqs = [Request(i, i * 40 * MS, 10, 3) for i in range(1000)]  # 40 ms apart: completions interleave
    stats = _run(tmp_path, reqs, "fixed:ttft_ms=50,itl_ms=10,servers=1", progress=progress)
    assert stats.status == "interrupted"
    assert 0 < stats.finished < 1000 and stats.cancelled > 0
    assert stats.submitted == stats.finished + stats.cancelled  # each submitted request ended once
    per_req = (
        duckdb.connect()
        .execute(
            f"SELECT count(*) FILTER (WHERE kind IN ('FINISH','CANCEL')) AS n "
            f"FROM read_parquet('{table_glob(tmp_path)}') GROUP BY req_id"
        )
        .fetchall()
    )
    assert {n for (n,) in per_req} == {1}


@pytest.mark.parametrize("bad", ["fixed:ttft_ms=-1", "fixed:servers=abc", "fixed:nope=1"])
def test_bad_fixed_target_options_are_config_errors(tmp_path, bad):
    from kvbench.config import ConfigError

    with pytest.raises(ConfigError):
        build(resolve(bad), RunContext(0, tmp_path, EventLog(tmp_path)))


class _ScriptedRealtimeTarget:
    """Emits a fixed script of (t_ns, kind) for one request; before each event, `before(t_ns)` may age the log."""

    def __init__(self, script, before):
        self.script, self.before, self.req = script, before, None

    def submit(self, req, at_ns):
        self.req = req

    def run(self, emit):
        for t_ns, kind in self.script:
            self.before(t_ns)
            emit((t_ns, self.req.req_id, kind, None, 1, None, None, None, None))


def test_realtime_flush_is_looked_at_when_event_time_passes_each_tenth_of_a_second(tmp_path):
    # The log's buffer is made to look 2 s old before every event; the replayer only looks at it when an
    # event's time reaches the next 0.1 s mark: at 100 ms (flushes ARRIVE..CHUNK@100), not at 150 ms (the next
    # mark is 200 ms), then at 250 ms (flushes the rest). So 2 parts before close, of 3 and 2 rows.
    log = EventLog(tmp_path, realtime=True)
    parts_seen = []

    def before(t_ns):
        parts_seen.append(len(log.events.parts))
        log.events._last_flush_ns -= 2_000_000_000

    script = [(0, "ARRIVE"), (50 * MS, "FIRST_TOKEN"), (100 * MS, "CHUNK"), (150 * MS, "CHUNK"), (250 * MS, "FINISH")]
    stats = Replayer(_ScriptedRealtimeTarget(script, before), log).run(iter([Request(0, 0, 10, 3)]))
    assert stats.finished == 1
    assert parts_seen == [0, 0, 0, 1, 1] and len(log.events.parts) == 2
    assert [
        duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{p}')").fetchall()[0][0] for p in log.events.parts
    ] == [
        3,
        2,
    ]
    log.close()
