"""A run whose client fell behind (run.json client_lag.behind) is flagged at the top of the report and in
`kvbench summary`; runs on time (or simulated, without client_lag) are not. Hand-built runs plus one real
endpoint run against the fault server on 127.0.0.1 (which also reports the achieved prompt length)."""

from __future__ import annotations

import io
import json

import duckdb
import pytest
from support.faultserver import FaultServer
from support.metrics_logs import real_run

from kvbench.eventlog import read_manifest, write_manifest
from kvbench.present import summary
from kvbench.present.report import build_report
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.target import TargetSpec
from kvbench.workload.load import Workload

LAG_BEHIND = {
    "requests": 5,
    "p50_ms": 3.0,
    "p99_ms": 12.345,
    "max_ms": 14.0,
    "threshold_ms": 10.0,
    "behind": True,
    "warning": "client fell behind the schedule: send lag p99 12.3 ms > 10 ms; ...",
}
LAG_OK = {"requests": 5, "p50_ms": 0.1, "p99_ms": 0.4, "max_ms": 0.5, "threshold_ms": 10.0, "behind": False}
# p99 12.345 -> "12.3" (one decimal), threshold 10.0 -> "10" (%g)
TEXT = (
    "run lagged: the client fell behind the schedule: send lag p99 12.3 ms > threshold 10 ms; "
    "its latencies (TTFT, E2E) include client delay"
)


def _with_lag(run_dir, lag):
    real_run(run_dir)
    if lag is not None:
        write_manifest(run_dir, {**read_manifest(run_dir), "client_lag": lag})
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lag")
    return _with_lag(root / "lagged", LAG_BEHIND), _with_lag(root / "ontime", LAG_OK), _with_lag(root / "sim", None)


def test_html_report_warns_at_the_top_for_the_lagging_run_only(runs):
    page = build_report(list(runs), "html")
    assert page.count('class="warn"') == 1
    assert f"⚠ Warning: {TEXT.replace('>', '&gt;')}" in page
    assert page.index('class="warn"') < page.index('<section id="runs">')  # above every section


def test_markdown_report_warns_and_runs_on_time_do_not(runs):
    lagged, ontime, sim = runs
    assert f"> **⚠ Warning:** {TEXT.replace('>', '&gt;')}" in build_report([ontime, lagged], "md")
    assert "Warning" not in build_report([ontime, sim], "md")
    assert "| client lag p99 (ms) |" in build_report([ontime, sim], "md")  # the figure itself is still shown


def test_summary_prints_the_warning_on_one_line(runs):
    lagged, ontime, sim = runs
    doc = summary.build(lagged)
    assert doc["client_lag"] == LAG_BEHIND  # summary.json carries run.json's block
    out = io.StringIO()
    summary.print_summary(doc, out)
    assert out.getvalue().splitlines()[0] == f"warning: {TEXT}"
    for quiet in (ontime, sim):
        out = io.StringIO()
        summary.print_summary(summary.build(quiet), out)
        assert "warning" not in out.getvalue()
    assert "client_lag" not in summary.build(sim)


def test_real_endpoint_run_behind_is_reported_with_its_figures(tmp_path):
    wl = Workload("t", "mem", "0", lambda: iter([Request(0, 0, 21, 2), Request(1, 1_000_000, 21, 2)]))
    with FaultServer() as srv:
        spec = TargetSpec(
            "openai",
            "fault",
            {
                "kind": "openai",
                "base_url": srv.base_url,
                "model": "fault-model",
                "word_tokens": 2.0,
                "read_timeout_s": 0.3,
                "lag_warn_ms": 0.0,
            },
        )
        run_dir, stats = execute(wl, spec, RunOptions(out=tmp_path / "real"))
    assert stats.status == "complete"
    lag = json.loads((run_dir / "run.json").read_text())["client_lag"]
    assert lag["behind"] is True  # any lag is above a 0 ms threshold
    md = build_report([run_dir], "md")
    assert (
        f"send lag p99 {lag['p99_ms']:.1f} ms &gt; threshold 0 ms; its latencies (TTFT, E2E) include client delay"
    ) in md and f"run {run_dir.name}: the client fell behind" in md
    # The fault server reports usage.prompt_tokens = 21 for each 21-token prompt: ratio 42 / 42, delta 0.
    details = (
        duckdb.connect()
        .execute(f"SELECT detail FROM read_parquet('{run_dir}/events/*.parquet') WHERE kind = 'FINISH'")
        .fetchall()
    )
    assert details == [("prompt_tokens=21",)] * 2
    m = summary.build(run_dir)["metrics"]
    assert (m["input_len_delta.count"], m["input_len_ratio"], m["input_len_delta.p50"]) == (2, 1.0, 0)
    assert "| input length, achieved / intended | 1 |" in md
