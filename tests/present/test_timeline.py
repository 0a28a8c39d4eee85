"""Chrome-trace export: hand-built sim and real event logs, lanes that never overlap, the request cap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbench.cli.app import app
from kvbench.eventlog import EventLog, write_manifest
from kvbench.present.timeline import assign_lanes, build_trace
from kvbench.records import Event

MS = 1_000_000  # ns per ms


def _write_run(run_dir: Path, events: list[Event], kind: str, steps: list[tuple] = ()) -> Path:
    log = EventLog(run_dir)
    for e in events:
        log.emit(tuple(e))
    for row in steps:
        log.table("steps").append(row)
    log.close()
    write_manifest(
        run_dir, {"schema_version": 1, "run_id": "hand", "status": "complete", "target": {"kind": kind, "name": kind}}
    )
    return run_dir


def _check_valid(trace: dict) -> dict[tuple[int, int], list[tuple[int, int, str]]]:
    """Every event has a known phase and its fields; X slices per (pid, tid) never overlap (checked in ns)."""
    tracks: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for e in trace["traceEvents"]:
        assert e["ph"] in {"X", "M", "C", "i"}, e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            a = round(e["ts"] * 1000)
            tracks.setdefault((e["pid"], e["tid"]), []).append((a, a + round(e["dur"] * 1000), e["name"]))
    for spans in tracks.values():
        spans.sort()
        for (_a0, b0, _), (a1, _, _) in zip(spans, spans[1:]):
            assert b0 <= a1, spans
    return tracks


def _sim_events() -> list[Event]:
    # Request 0: arrives 0, routed to prefill-0, queues 0..2 ms, prefills 2..10, transfers 10..12 to decode-0,
    # decodes 12..30. Request 1: arrives 1 ms, queues until 10 (prefill-0 busy), prefills 10..15, rejected? no:
    # errors at 15 ms on prefill-0 (so its only phases are queue 1..10 and prefill 10..15).
    ev = [
        Event(0, 0, "ARRIVE", tokens=100),
        Event(0, 0, "SEND"),
        Event(0, 0, "ROUTE", "prefill-0"),
        Event(2 * MS, 0, "PREFILL_START", "prefill-0"),
        Event(10 * MS, 0, "PREFILL_END", "prefill-0"),
        Event(10 * MS, 0, "KV_XFER_START", "decode-0", nbytes=4096),
        Event(12 * MS, 0, "KV_XFER_END", "decode-0", nbytes=4096),
        Event(12 * MS, 0, "DECODE_START", "decode-0"),
        Event(12 * MS, 0, "FIRST_TOKEN", "decode-0", tokens=1),
        Event(30 * MS, 0, "LAST_TOKEN", "decode-0", 10),
        Event(30 * MS, 0, "FINISH", "decode-0", tokens=10),
        Event(1 * MS, 1, "ARRIVE", tokens=50),
        Event(1 * MS, 1, "SEND"),
        Event(1 * MS, 1, "ROUTE", "prefill-0"),
        Event(10 * MS, 1, "PREFILL_START", "prefill-0"),
        Event(15 * MS, 1, "ERROR", "prefill-0", detail="oom: <script>alert(1)</script>"),
    ]
    return sorted(ev, key=lambda e: e.t_ns)


def test_sim_trace_has_instance_tracks_steps_and_phases(tmp_path: Path) -> None:
    steps = [
        ("prefill-0", 2 * MS, 10 * MS, 1, 1, 100, 0, 7, 100),
        ("prefill-0", 10 * MS, 15 * MS, 1, 1, 50, 0, 11, 100),
        ("decode-0", 12 * MS, 30 * MS, 9, 1, 0, 1, 3, 100),
    ]
    run = _write_run(tmp_path / "sim", _sim_events(), "sim", steps)
    trace = build_trace(run)
    tracks = _check_valid(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    pid = {v: k for k, v in names.items()}
    assert set(pid) == {"decode-0", "prefill-0"}
    # Steps on track 0 of each instance, with batch args.
    assert tracks[(pid["prefill-0"], 0)] == [(2 * MS, 10 * MS, "batch 1"), (10 * MS, 15 * MS, "batch 1")]
    assert tracks[(pid["decode-0"], 0)] == [(12 * MS, 30 * MS, "batch 1")]
    # On prefill-0 request 0 spans 0..10 ms and request 1 spans 1..15: they overlap, so two lanes (tids 1, 2).
    assert tracks[(pid["prefill-0"], 1)] == [(0, 2 * MS, "queue"), (2 * MS, 10 * MS, "prefill")]
    assert tracks[(pid["prefill-0"], 2)] == [(1 * MS, 10 * MS, "queue"), (10 * MS, 15 * MS, "prefill")]
    assert tracks[(pid["decode-0"], 1)] == [(10 * MS, 12 * MS, "transfer"), (12 * MS, 30 * MS, "decode")]
    (marker,) = [e for e in trace["traceEvents"] if e["ph"] == "i"]  # request 1's ERROR, on its lane
    assert (marker["pid"], marker["tid"], marker["ts"]) == (pid["prefill-0"], 2, 15_000.0)  # 15 ms in µs
    assert marker["args"] == {"req_id": 1, "detail": "oom: <script>alert(1)</script>"}
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert [c["args"]["used"] for c in counters] == [3, 7, 11]  # decode-0 sorts first by instance name
    assert trace["otherData"]["kind"] == "sim" and trace["otherData"]["requests"] == 2


def test_real_run_lanes_by_overlap_and_request_cap(tmp_path: Path) -> None:
    # Three requests, real-endpoint style. r0: 0..40 ms, r1: 5..20 ms (overlaps r0 -> lane 1), r2: 25..60 ms
    # (starts after r1 ended at 20 -> reuses lane 1, the lowest free lane).
    ev = []
    for rid, a, first, last in ((0, 0, 10, 40), (1, 5, 8, 20), (2, 25, 30, 60)):
        ev += [
            Event(a * MS, rid, "ARRIVE"),
            Event(a * MS + MS // 2, rid, "SEND"),
            Event(first * MS, rid, "FIRST_TOKEN", "http://x", 1),
            Event(first * MS + 1, rid, "CHUNK", "http://x", 1),
            Event(last * MS, rid, "LAST_TOKEN", "http://x", 5),
            Event(last * MS, rid, "FINISH", "http://x", 5),
        ]
    run = _write_run(tmp_path / "real", sorted(ev, key=lambda e: e.t_ns), "openai")
    tracks = _check_valid(build_trace(run))
    assert sorted(tracks) == [(1, 0), (1, 1)]
    assert tracks[(1, 0)] == [
        (0, MS // 2, "client lag"),
        (MS // 2, 10 * MS, "waiting first token"),
        (10 * MS, 40 * MS, "streaming"),
    ]
    assert [s[2] for s in tracks[(1, 1)]] == ["client lag", "waiting first token", "streaming"] * 2
    assert tracks[(1, 1)][3][0] == 25 * MS
    capped = build_trace(run, max_requests=2)
    assert capped["otherData"]["requests"] == 2 and "2 of 3 requests" in capped["otherData"]["note"]
    assert {e["args"]["req_id"] for e in capped["traceEvents"] if e["ph"] == "X"} == {0, 1}


def test_cli_timeline_on_fixed_target_run(tmp_path: Path, synthetic_trace: Path) -> None:
    runner = CliRunner()
    run = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "replay",
            "--trace",
            str(synthetic_trace),
            "--target",
            "fixed:ttft_ms=50,itl_ms=10,servers=2",
            "-n",
            "40",
            "--out",
            str(run),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    out = tmp_path / "trace.json"
    res = runner.invoke(app, ["timeline", str(run), "-o", str(out), "--max-requests", "30"])
    assert res.exit_code == 0, res.output
    trace = json.loads(out.read_text())
    _check_valid(trace)
    assert len({e["args"]["req_id"] for e in trace["traceEvents"] if e["ph"] == "X"}) == 30
    bad = subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", "timeline", str(tmp_path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no run.json" in bad.stderr and bad.stderr.count("\n") == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 30)), max_size=40))
def test_assign_lanes_never_overlaps_and_uses_max_overlap_lanes(spans: list[tuple[int, int]]) -> None:
    intervals = [(a, a + d, i) for i, (a, d) in enumerate(spans)]
    lanes = assign_lanes(intervals)
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for a, b, key in intervals:
        by_lane.setdefault(lanes[key], []).append((a, b))
    for iv in by_lane.values():
        iv.sort()
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(iv, iv[1:]))
    # Half-open intervals: the most that contain one point is the fewest lanes possible, and greedy reaches it.
    depth = max((sum(a <= t < b for a, b, _ in intervals) for t in range(131)), default=0)
    assert len(by_lane) == depth


@st.composite
def _real_logs(draw):
    """Requests of a real endpoint: ARRIVE <= SEND <= FIRST_TOKEN <= LAST_TOKEN = FINISH, or an ERROR after SEND."""
    rows = []
    for rid in range(draw(st.integers(1, 12))):
        a = draw(st.integers(0, 50))
        send = a + draw(st.integers(0, 3))
        if draw(st.booleans()):
            first = send + draw(st.integers(0, 20))
            last = first + draw(st.integers(0, 30))
            kinds = [(a, "ARRIVE"), (send, "SEND"), (first, "FIRST_TOKEN"), (last, "LAST_TOKEN"), (last, "FINISH")]
        else:
            kinds = [(a, "ARRIVE"), (send, "SEND"), (send + draw(st.integers(0, 20)), "ERROR")]
        rows += [(rid, t, k, "ep", "boom: x" if k == "ERROR" else None) for t, k in kinds]
    return rows


@settings(max_examples=60, deadline=None)
@given(_real_logs())
def test_real_phases_tile_each_request_and_never_overlap_on_a_lane(rows) -> None:
    from kvbench.present.timeline import phases, request_events

    slices = list(phases(rows, sim=False))
    events = request_events(slices, False, {"": 1})
    by_req: dict[int, list] = {}
    for s in slices:
        if s.end_ns > s.start_ns:
            by_req.setdefault(s.req_id, []).append((s.start_ns, s.end_ns))
    for rid, spans in by_req.items():  # phases of one request are back to back from ARRIVE to its end
        mine = [r for r in rows if r[0] == rid]
        spans.sort()
        assert all(b == a2 for (_, b), (a2, _) in zip(spans, spans[1:]))
        assert spans[0][0] == mine[0][1] and spans[-1][1] == max(r[1] for r in mine)
    tracks: dict[int, list] = {}
    for e in events:
        if e["ph"] == "X":
            a = round(e["ts"] * 1000)  # back to integer ns: µs floats do not add up exactly
            tracks.setdefault(e["tid"], []).append((a, a + round(e["dur"] * 1000), e["args"]["req_id"]))
    for spans in tracks.values():
        spans.sort()
        assert all(b0 <= a1 or r0 == r1 for (_, b0, r0), (a1, _, r1) in zip(spans, spans[1:]))
    assert sum(e["ph"] == "i" for e in events) == sum(r[2] == "ERROR" for r in rows)
