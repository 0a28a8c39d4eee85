"""Achieved vs intended prompt length: per_request.prompt_tokens parsed from the FINISH detail, the run figures
input_len_ratio / input_len_delta.*, the summary line and the report rows, on a hand-built log."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from support.metrics_logs import ev, real_run, req, write_run

from kvbench.analysis.metrics import open_runs, per_request
from kvbench.present import summary
from kvbench.present.report import build_report


def _run(run_dir):
    """r0: intended 100, server says 103. r1: intended 200, short output, server says 190. r2: intended 50,
    prompt_tokens followed by a retry note: 55. r3: intended 300, FINISH without detail (no usage): NULL.
    r4: ERROR whose detail happens to hold "prompt_tokens=999": not a finished request, NULL."""
    e = [
        ev(0, 0, "ARRIVE", tokens=100),
        ev(0, 0, "SEND"),
        ev(10, 0, "FIRST_TOKEN", "ep", 1),
        ev(40, 0, "LAST_TOKEN", "ep", 4),
        ev(40, 0, "FINISH", "ep", 4, detail="prompt_tokens=103"),
        ev(5, 1, "ARRIVE", tokens=200),
        ev(5, 1, "SEND"),
        ev(20, 1, "FIRST_TOKEN", "ep", 1),
        ev(30, 1, "LAST_TOKEN", "ep", 3),
        ev(30, 1, "FINISH", "ep", 3, detail="short_output: got 3 of 4 tokens; prompt_tokens=190"),
        ev(6, 2, "ARRIVE", tokens=50),
        ev(6, 2, "SEND"),
        ev(16, 2, "FIRST_TOKEN", "ep", 1),
        ev(16, 2, "LAST_TOKEN", "ep", 1),
        ev(16, 2, "FINISH", "ep", 1, detail="prompt_tokens=55; retry 1 after http_503: unavailable"),
        ev(7, 3, "ARRIVE", tokens=300),
        ev(7, 3, "SEND"),
        ev(17, 3, "FIRST_TOKEN", "ep", 1),
        ev(17, 3, "LAST_TOKEN", "ep", 1),
        ev(17, 3, "FINISH", "ep", 1),
        ev(8, 4, "ARRIVE", tokens=80),
        ev(8, 4, "SEND"),
        ev(9, 4, "ERROR", "ep", detail="server_error: prompt_tokens=999"),
    ]
    return write_run(
        run_dir, e, [req(0, 0, 100, 4), req(1, 5, 200, 4), req(2, 6, 50, 1), req(3, 7, 300, 1), req(4, 8, 80, 4)]
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("plen") / "real")


def test_prompt_tokens_column_from_finish_detail(run):
    con = open_runs([run])
    try:
        df = per_request(con).set_index("req_id")
    finally:
        con.close()
    got = {rid: (None if pd.isna(v) else int(v)) for rid, v in df["prompt_tokens"].items()}
    assert got == {0: 103, 1: 190, 2: 55, 3: None, 4: None}
    assert df["input_tokens"].to_dict() == {0: 100, 1: 200, 2: 50, 3: 300, 4: 80}  # intended, unchanged
    assert df.loc[4, "reason"] == "server_error"  # the terminal detail still classifies failures


def test_input_len_figures_by_hand(run):
    m = summary.build(run)["metrics"]
    # requests with both: r0 r1 r2. ratio = (103 + 190 + 55) / (100 + 200 + 50) = 348 / 350
    assert m["input_len_delta.count"] == 3
    assert m["input_len_ratio"] == pytest.approx(348 / 350)
    # deltas +3, -10, +5 -> sorted -10, 3, 5: p50 = 3 (h = 0.5 * 2 = 1), min -10, max +5
    assert (m["input_len_delta.p50"], m["input_len_delta.min"], m["input_len_delta.max"]) == (3, -10, 5)


def test_runs_without_prompt_tokens_have_none(tmp_path):
    m = summary.build(real_run(tmp_path / "r"))["metrics"]  # FINISH events without detail (like simulated runs)
    assert m["input_len_delta.count"] == 0
    assert m["input_len_ratio"] is None and m["input_len_delta.p50"] is None
    out = io.StringIO()
    summary.print_summary({"run_id": "r", "status": "complete", "metrics": m}, out)
    assert "input length" not in out.getvalue()


def test_summary_prints_and_report_shows_input_length(run, tmp_path):
    out = io.StringIO()
    summary.print_summary(summary.build(run), out)
    text = " ".join(out.getvalue().split())
    # 348 / 350 = 0.99428...; p50 +3, min -10, max +5 over 3 requests
    assert "input length achieved/intended 0.994 over 3 requests" in text, text
    assert "achieved − intended p50 +3 tokens (min −10, max +5)" in text, text
    md = build_report([run], "md")
    assert "| input length, achieved / intended | 0.9943 |" in md
    assert "| input length, achieved − intended p50 (tokens) | 3 |" in md
    plain = build_report([real_run(tmp_path / "plain")], "md")
    assert "input length" not in plain
