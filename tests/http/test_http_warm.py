"""The pool is warmed before t0: the first requests' connections are open when they are sent, so connect time is
not in their TTFT; a connection opened after t0 still says so on its SEND (`kvbench serve` in its own process)."""

from __future__ import annotations

import json

import pytest
from support.faultserver import q
from support.serve_proc import served

from kvbench.records import Request
from kvbench.run import START_MARGIN_NS, RunOptions, execute
from kvbench.target import TargetSpec
from kvbench.workload.stream import Workload


@pytest.fixture(scope="module")
def serve_url():
    with served("--target", "fixed:ttft_ms=300,itl_ms=1") as url:
        yield url


def _run(serve_url: str, requests: list[Request], out, **opts) -> list[tuple]:
    wl = Workload("t", "mem", "0", lambda: iter(requests))
    spec = TargetSpec(
        "openai", "serve", {"kind": "openai", "base_url": serve_url, "model": "kvbench", "word_tokens": 1.0}
    )
    run_dir, stats = execute(wl, spec, RunOptions(out=out, **opts))
    assert stats.finished == len(requests)
    assert json.loads((run_dir / "run.json").read_text())["wall_s"] < 30
    return q(run_dir, "SELECT req_id, detail FROM EV WHERE kind = 'SEND' ORDER BY req_id")


def test_a_closed_loop_opens_its_users_connections_before_t0(tmp_path, serve_url):
    reqs = [Request(i, 0, 8, 2) for i in range(8)]
    sends = _run(serve_url, reqs, tmp_path / "r", concurrency=4, closed=True)
    # 4 users, 4 connections opened in the start margin: no SEND, first four or later, opened one
    assert sends == [(i, None) for i in range(8)]


def test_a_connection_opened_after_t0_is_recorded_on_send(tmp_path, serve_url):
    # request 0 is due at t = 0 (warmed); request 1 at 0.2 s, past the warm-up span, while 0 is still waiting for
    # its first token (TTFT 300 ms): it opens a connection of its own, and its SEND says how long that took
    sends = _run(serve_url, [Request(0, 0, 8, 2), Request(1, 200_000_000, 8, 2)], tmp_path / "r")
    assert sends[0] == (0, None)
    assert sends[1][1].startswith("connect_ns=") and int(sends[1][1].removeprefix("connect_ns=")) > 0
    assert START_MARGIN_NS == 200_000_000
