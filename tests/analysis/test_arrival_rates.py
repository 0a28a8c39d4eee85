"""Achieved and scheduled arrival rates (arrivals.sql), each SLO's own attainment (slo_parts.sql), the nominal rate
of run.json and the warning when they part, on hand-built logs whose figures are computed by hand."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from support.metrics_logs import ev, real_run, req, sim_run, write_run

from kvbench.analysis.figures import summary
from kvbench.analysis.rates import Rates, rate_warning, rates_of
from kvbench.analysis.slo import parse_slo
from kvbench.present import summary as present_summary


def _session_run(run_dir: Path, shaping: dict | None = None) -> Path:
    """Two 2-turn sessions and one request outside sessions (ms): session 0 starts at 0 (turn 1 at 1000),
    session 1 at 100 (turn 1 at 1500), the lone request at 200; every request finishes 50 ms after it arrives."""
    rows = [(0, 0, 0, 0), (1, 0, 1, 1000), (2, 1, 0, 100), (3, 1, 1, 1500), (4, -1, 0, 200)]
    events, requests = [], []
    for rid, sid, turn, t in rows:
        events += [ev(t, rid, "ARRIVE", tokens=10), ev(t + 10, rid, "FIRST_TOKEN", "ep", 1)]
        events += [ev(t + 50, rid, "LAST_TOKEN", "ep", 5), ev(t + 50, rid, "FINISH", "ep", 5)]
        requests.append(req(rid, t, 10, 5)[:1] + (sid, turn) + req(rid, t, 10, 5)[3:])
    manifest = {"workload": {"shaping": shaping}} if shaping is not None else None
    return write_run(run_dir, events, requests, manifest=manifest)


def test_sessions_schedule_more_than_arrives(tmp_path: Path) -> None:
    m = summary(_session_run(tmp_path / "s"))
    # 5 ARRIVEs from 0 to 1500 ms: 4 gaps / 1.5 s. Starts at 0, 100, 200 ms: 2 gaps / 0.2 s = 10 starts/s,
    # x 5 requests / 3 starts.
    assert m["arrival_rate"] == pytest.approx(4 / 1.5)
    assert m["scheduled_rate"] == pytest.approx(10 * 5 / 3)


def test_without_sessions_the_schedule_is_what_arrived(tmp_path: Path) -> None:
    m = summary(sim_run(tmp_path / "sim"))
    assert m["arrival_rate"] == pytest.approx(20.0) == m["scheduled_rate"]  # arrivals at 0 and 50 ms
    # real_run: ARRIVEs at 0, 50, 100, 150, 200, 300 ms (5 gaps in 0.3 s); request 6, cancelled unsent, never
    # arrived and counts in neither.
    m = summary(real_run(tmp_path / "real"))
    assert m["arrival_rate"] == pytest.approx(5 / 0.3) == m["scheduled_rate"]


def test_each_slo_on_its_own(tmp_path: Path) -> None:
    run = real_run(tmp_path / "real")
    # Finished (arrival -> first, last token): 0 (TTFT 100, TPOT (160-100)/3 = 20, E2E 160), 1 (arrives at 50:
    # TTFT 200, one token, E2E 200), 5 (arrives at 300: TTFT 100, TPOT 155/11 = 14.1, E2E 255); 7 requests in all.
    m = summary(run, parse_slo("ttft=150,tpot=15,e2el=200"))
    assert m["finished_ratio"] == pytest.approx(3 / 7)
    assert m["ttft_attainment"] == pytest.approx(2 / 7)  # 0 and 5
    assert m["tpot_attainment"] == pytest.approx(2 / 7)  # 1 (no TPOT: met) and 5
    assert m["e2el_attainment"] == pytest.approx(2 / 7)  # 0 and 1
    assert m["tbt_attainment"] is None  # not given
    assert m["slo_attainment"] == 0.0  # no request meets all three
    assert summary(run, parse_slo("ttft=150,tpot=15"))["slo_attainment"] == pytest.approx(1 / 7)  # 5
    none = summary(run)
    assert none["ttft_attainment"] is None and none["finished_ratio"] == pytest.approx(3 / 7)


def test_nominal_rate_is_the_asked_one_else_the_schedule(tmp_path: Path) -> None:
    figs = {"arrival_rate": 8.0, "scheduled_rate": 10.0}
    assert rates_of({"workload": {"shaping": {"rate_per_s": 20}}}, figs) == Rates(8.0, 20.0, 10.0, "asked")
    asked = {"workload": {"shaping": {"nominal_rate_per_s": 12.5, "time_scale": 2.0}}}
    assert rates_of(asked, figs).nominal == 12.5
    r = rates_of({}, figs)
    assert (r.nominal, r.source, r.gap) == (10.0, "schedule", pytest.approx(-0.2))


def test_warning_beyond_five_percent_names_the_reason() -> None:
    assert rate_warning(Rates(9.6, 10.0, 10.0, "asked")) is None  # 4 % off
    text = rate_warning(Rates(8.0, 20.0, 19.0, "asked"))
    assert text == (
        "achieved arrival rate 8 req/s is 60% below the nominal 20 req/s "
        "(later session turns wait for the answer to the previous turn and a think time)"
    )
    assert "schedule itself offered 9.3" in rate_warning(Rates(9.3, 10.0, 9.3, "asked"))


def test_summary_shows_achieved_beside_nominal_and_warns(tmp_path: Path) -> None:
    run = _session_run(tmp_path / "s", {"rate_per_s": 20.0})
    doc = present_summary.build(run)
    assert doc["rates"]["nominal_per_s"] == 20.0 and doc["rates"]["nominal_source"] == "asked"
    out = io.StringIO()
    present_summary.print_summary(doc, out)
    text = out.getvalue()
    assert text.splitlines()[0].startswith("warning: run s: achieved arrival rate 2.667 req/s is 87% below")
    assert "2.667 req/s achieved, nominal 20.000 req/s (asked; −86.7 %), scheduled 16.667 req/s" in text
