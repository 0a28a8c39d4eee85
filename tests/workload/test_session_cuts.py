"""Cutting a session trace (--start, --duration, -n): the first kept turn of a session starts it (issue 10)."""

from __future__ import annotations

import json

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbench.cli.app import app
from kvbench.config import ConfigError
from kvbench.eventlog import table_glob

FIXED = "fixed:ttft_ms=5,itl_ms=1,servers=0"


@st.composite
def session_traces(draw) -> list[dict]:
    """Sessions of 1-4 turns; turn k is recorded 1-3 s after turn k-1 (the replay releases it on FINISH + think)."""
    rows = []
    for sid in range(draw(st.integers(1, 5))):
        t_ms = draw(st.integers(0, 5_000))
        for turn in range(draw(st.integers(1, 4))):
            rows.append(
                {
                    "timestamp": t_ms,
                    "input_length": 600,
                    "output_length": 3,
                    "hash_ids": [sid * 10, 1000 + sid * 10 + turn],
                    "session_id": sid,
                    "turn": turn,
                    "think_ms": 100,
                }
            )
            t_ms += draw(st.integers(1_000, 3_000))
    return sorted(rows, key=lambda r: r["timestamp"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_traces(), start_s=st.integers(0, 12), duration_s=st.one_of(st.none(), st.integers(1, 10)))
def test_any_cut_of_a_session_trace_replays_with_rebased_sessions(tmp_path_factory, rows, start_s, duration_s):
    tmp = tmp_path_factory.mktemp("cut")
    trace = tmp / "t.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    args = ["replay", "--trace", str(trace), "--target", FIXED, "--start", str(start_s), "-q", "--out", str(tmp / "r")]
    if duration_s is not None:
        args += ["--duration", str(duration_s)]
    end_ms = None if duration_s is None else (start_s + duration_s) * 1000
    kept = [r for r in rows if r["timestamp"] >= start_s * 1000 and (end_ms is None or r["timestamp"] < end_ms)]
    result = CliRunner().invoke(app, args)
    if not kept:
        assert isinstance(result.exception, ConfigError) and "no requests to replay" in str(result.exception)
        return
    assert result.exit_code == 0, result.output
    con = duckdb.connect()
    got = con.execute(
        f"SELECT session_id, turn, arrival_ns FROM read_parquet('{table_glob(tmp / 'r', 'requests')}') ORDER BY session_id, turn"
    ).fetchall()
    expected = []
    for sid in sorted({r["session_id"] for r in kept}):
        turns = [r for r in kept if r["session_id"] == sid]
        expected += [(sid, k, None) for k in range(len(turns))]
        first_arrival_ns = (turns[0]["timestamp"] - start_s * 1000) * 1_000_000
        assert (sid, 0, first_arrival_ns) in got
    assert [g[:2] for g in got] == [e[:2] for e in expected]
    ends = con.execute(
        f"SELECT kind::VARCHAR, count(*) FROM read_parquet('{table_glob(tmp / 'r')}') "
        "WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL') GROUP BY ALL"
    ).fetchall()
    assert ends == [("FINISH", len(kept))]
