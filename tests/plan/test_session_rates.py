"""Rates on session workloads: --rate re-times session starts; a goodput probe records the rate it asked for and
the rate that arrived, and the search reports goodput at the achieved rate (fixed target, figures by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.analysis.slo import parse_slo
from kvbench.eventlog import read_manifest
from kvbench.plan.goodput import GoodputResult, Probe, ProbePlan, curve_csv, format_result, run_probe
from kvbench.targets import resolve
from kvbench.workload import load
from kvbench.workload.arrivals import ArrivalSpec, iter_arrivals_ns

SESSIONS, START_GAP_MS, THINK_MS = 10, 200, 1000


def _session_trace(path: Path) -> Path:
    """10 two-turn sessions starting every 200 ms; turn 1's timestamp is nominal (turn 0's + the think time)."""
    lines = []
    for s in range(SESSIONS):
        t0 = s * START_GAP_MS
        for turn, t in ((0, t0), (1, t0 + THINK_MS)):
            rec = {"timestamp": t, "input_length": 10, "output_length": 6, "hash_ids": [], "session_id": s}
            lines.append(json.dumps(rec | {"turn": turn, "think_ms": THINK_MS if turn else 0}))
    lines.sort(key=lambda line: json.loads(line)["timestamp"])
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rate_re_times_session_starts_only(tmp_path: Path) -> None:
    w = load.from_trace(_session_trace(tmp_path / "s.jsonl"))
    r = load.retime_poisson(w, 10.0, seed=3)
    assert r.shaping["rate_per_s"] == 10.0 and r.shaping["start_rate_per_s"] == 5.0  # 10 starts per 20 requests
    reqs = list(r.requests())
    start_of = {q.session_id: q.arrival_ns for q in reqs if q.turn == 0}
    assert [q.req_id for q in reqs] == [q.req_id for q in w.requests()]  # same requests, same order
    assert all(q.arrival_ns >= start_of[q.session_id] for q in reqs if q.turn == 1)
    assert [q.arrival_ns for q in reqs] == sorted(q.arrival_ns for q in reqs)
    poisson = iter_arrivals_ns(ArrivalSpec("poisson", 5.0), 3)  # the starts: Poisson at 5 sessions/s
    assert sorted(start_of.values()) == [next(poisson) for _ in range(SESSIONS)]


def test_probe_on_sessions_records_nominal_and_achieved(tmp_path: Path) -> None:
    # Time scale 2: starts every 100 ms (0 .. 900). Each request takes 50 ms + 5 x 10 ms = 100 ms on an idle
    # server (4 servers: no queueing), so turn 1 arrives at its start + 100 + 1000 (think is not scaled):
    # 20 arrivals from 0 to 2000 ms, 19 gaps / 2 s = 9.5 req/s. The trace's own rate: 19 gaps in 2.8 s.
    w = load.from_trace(_session_trace(tmp_path / "s.jsonl"))
    base = 19 / 2.8
    plan = ProbePlan(w, resolve("fixed:ttft_ms=50,itl_ms=10,servers=4"), parse_slo("ttft=60"), tmp_path, base)
    p = run_probe(plan, 2 * base)
    assert p.rate == pytest.approx(2 * base) and p.achieved_rate == pytest.approx(9.5)
    assert p.attainment == 1.0 and p.requests == 20 and p.parts["ttft_attainment"] == 1.0
    assert p.parts["finished_ratio"] == 1.0 and p.parts["tpot_attainment"] is None
    shaping = read_manifest(p.run_dir)["workload"]["shaping"]
    assert shaping["nominal_rate_per_s"] == pytest.approx(2 * base) and shaping["time_scale"] == pytest.approx(2)


def test_goodput_is_the_achieved_rate_and_failures_are_named() -> None:
    parts_ok = {"finished_ratio": 1.0, "ttft_attainment": 0.95, "tpot_attainment": 1.0}
    probes = (
        Probe(10.0, 0.95, 100, "a", 7.5, parts_ok),
        Probe(20.0, 0.5, 100, "b", 9.0, {"finished_ratio": 1.0, "ttft_attainment": 0.5, "tpot_attainment": 0.8}),
        Probe(15.0, 0.85, 100, "c", 8.5, {"finished_ratio": 0.95, "ttft_attainment": 0.92, "tpot_attainment": 0.91}),
        Probe(12.0, 0.8, 100, "d", 8.0, {"finished_ratio": 0.85, "ttft_attainment": 0.99, "tpot_attainment": 0.99}),
    )
    res = GoodputResult(0.9, 0.05, 10.0, 12.0, probes, gpus=2, slo={"ttft": 100.0, "tpot": 20.0})
    assert res.goodput == 7.5 and res.per_gpu == 3.75
    assert [p.failed(0.9) for p in probes] == ["", "ttft+tpot", "joint", "errors"]
    csv = curve_csv(res).splitlines()
    assert csv[0] == (
        "rate,attainment,achieved_rate,failed,finished_ratio,ttft_attainment,tpot_attainment,e2el_attainment,"
        "tbt_attainment,requests,run_dir"
    )
    assert csv[1] == "10,0.950000,7.5,,1.000000,0.950000,1.000000,,,100,a"
    assert csv[2].startswith("12,0.800000,8,errors,0.850000,")
    text = format_result(res)
    assert "goodput: 7.5 req/s achieved (nominal 10) at >= 90% attainment, 3.75 req/s per GPU (2 GPUs)" in text
    assert "[fails at 8; precision 5%]" in text
