"""-c N on a trace whose requests are all due at once is a closed loop of N users in substance: run.json says so
and client lag is judged from slot free to send, as for --users N (`kvbench serve` in its own process)."""

from __future__ import annotations

import json

import pytest
from support.cli import kvbench
from support.serve_proc import served

from kvbench.workload import load


@pytest.fixture(scope="module")
def serve_url():
    with served("--target", "fixed:ttft_ms=20,itl_ms=1") as url:
        yield url


def _trace(path, stamps_ms: list[int]):
    rows = [{"timestamp": t, "input_length": 8, "output_length": 2, "hash_ids": [i]} for i, t in enumerate(stamps_ms)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replay(tmp_path, serve_url, stamps_ms: list[int]) -> dict:
    trace, out = _trace(tmp_path / "t.jsonl", stamps_ms), tmp_path / "run"
    r = kvbench("replay", "--trace", str(trace), "-t", serve_url, "-c", "2", "-o", str(out), "-q")
    assert r.returncode == 0, r.stderr
    return json.loads((out / "run.json").read_text())


def test_a_cap_on_requests_all_due_at_once_is_a_closed_loop(tmp_path, serve_url):
    m = _replay(tmp_path, serve_url, [5, 5, 5, 5])
    assert m["closed_loop"] == {"users": 2, "think_s": 0.0} and m["concurrency"] == 2
    lag = m["client_lag"]
    # 2 users: requests 0 and 1 open the loop together (reported apart, not judged); 2 and 3 each go when a
    # slot frees, and that refill delay is what is judged
    assert lag["mode"] == "closed-loop" and lag["opening"]["requests"] == 2 and lag["requests"] == 2


def test_a_cap_on_a_schedule_stays_a_cap(tmp_path, serve_url):
    m = _replay(tmp_path, serve_url, [0, 0, 1, 1])
    assert "closed_loop" not in m and m["concurrency"] == 2
    assert "mode" not in m["client_lag"] and m["client_lag"]["requests"] == 4  # a schedule: every send judged


def test_all_at_once(tmp_path):
    at_once = load.from_trace(_trace(tmp_path / "a.jsonl", [7, 7, 7]))
    spread = load.from_trace(_trace(tmp_path / "b.jsonl", [7, 7, 8]))
    assert load.all_at_once(at_once) and not load.all_at_once(spread)
