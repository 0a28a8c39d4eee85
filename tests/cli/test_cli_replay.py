"""End-to-end `kvbench replay` runs through the real console entry point: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json

import duckdb
import pytest
from support.cli import kvbench

from kvbench.eventlog import table_glob


def test_replay_conversation_trace_on_fixed_target(tmp_path, conversation_trace):
    out = tmp_path / "run"
    r = kvbench(
        "replay",
        "--trace",
        str(conversation_trace),
        "--target",
        "fixed:ttft_ms=50,itl_ms=10",
        "--max-requests",
        "500",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["counts"]["submitted"] == manifest["counts"]["finished"] == 500
    assert manifest["workload"]["shaping"]["max_requests"] == 500
    # Unlimited servers: every TTFT is exactly 50 ms from the intended arrival.
    ttfts = (
        duckdb.connect()
        .execute(f"""
        SELECT DISTINCT f.t_ns - a.t_ns FROM read_parquet('{table_glob(out)}') a
        JOIN read_parquet('{table_glob(out)}') f USING (req_id)
        WHERE a.kind = 'ARRIVE' AND f.kind = 'FIRST_TOKEN'""")
        .fetchall()
    )
    assert ttfts == [(50_000_000,)]


def test_time_scale_and_window(tmp_path, conversation_trace):
    # Keep [60 s, 120 s) of the trace replayed 2x faster: arrivals land in [0, 30 s).
    out = tmp_path / "run"
    r = kvbench(
        "replay",
        "--trace",
        str(conversation_trace),
        "--target",
        "fixed",
        "--start",
        "60",
        "--duration",
        "60",
        "--time-scale",
        "2",
        "--out",
        str(out),
        "-q",
    )
    assert r.returncode == 0, r.stderr
    lo, hi, n = (
        duckdb.connect()
        .execute(
            f"SELECT min(arrival_ns), max(arrival_ns), count(*) FROM read_parquet('{table_glob(out, 'requests')}')"
        )
        .fetchone()
    )
    assert 0 <= lo and hi < 30_000_000_000 and n > 0
    expected = sum(1 for line in conversation_trace.open() if 60_000 <= json.loads(line)["timestamp"] < 120_000)
    assert n == expected


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1, "input_len',
            ":2: invalid JSON",
        ),
        (b'{"timestamp": 0, "input_length": -4, "output_length": 5}\n', ":1: field 'input_length'"),
        (b'{"timestamp": 0, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2]}\n', ":1: field 'hash_ids'"),
        (b'{"timestamp": "soon", "input_length": 10, "output_length": 5}\n', ":1: field 'timestamp'"),
        (b"", "empty"),
    ],
)
def test_bad_trace_is_one_line_error_with_exit_2(tmp_path, content, message):
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(content)
    r = kvbench("replay", "--trace", str(trace), "--target", "fixed", "--out", str(tmp_path / "o"), "-q")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvbench: error:") and message in lines[0], r.stderr


def test_directory_and_missing_file_are_named(tmp_path):
    r = kvbench("replay", "--trace", str(tmp_path), "--target", "fixed", "-q")
    assert r.returncode == 2 and "is a directory" in r.stderr
    r = kvbench("replay", "--trace", str(tmp_path / "nope.jsonl"), "--target", "fixed", "-q")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_unknown_target_profile_lists_known_ones(tmp_path, conversation_trace):
    r = kvbench("replay", "--trace", str(conversation_trace), "--target", "no-such-profile", "-q")
    assert r.returncode == 2 and "unknown target profile 'no-such-profile'" in r.stderr


def test_help_explains_options_with_units():
    r = kvbench("replay", "--help")
    assert r.returncode == 0
    for text in ("--time-scale", "--concurrency", "--max-requests", "seconds"):
        assert text in r.stdout
