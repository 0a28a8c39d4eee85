"""One bootstrap configuration: `kvbench compare` and the report's comparison give a pair of runs the same
intervals (runs larger than the kept subsample, so the subsample is the same one too)."""

from __future__ import annotations

import json

from support.cli import kvbench

from kvbench.analysis.bootstrap import MAX_SAMPLE
from kvbench.present.collect import collect_run
from kvbench.present.report import _deltas

TRACE = "../shared/traces/conversation_trace.jsonl"
N = 2_500


def test_compare_and_the_report_give_the_same_intervals(tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run, scale in zip(runs, ("1", "1.5")):
        r = kvbench("replay", "--trace", TRACE, "-t", "sim", "-n", str(N), "--time-scale", scale, "-o", str(run), "-q")
        assert r.returncode == 0, r.stderr
    r = kvbench("compare", str(runs[0]), str(runs[1]), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    compared = {d["metric"]: d["ci"] for d in doc["deltas"] if d["ci"] is not None}
    assert doc["resamples"] == 1_000 and N > MAX_SAMPLE == 2_000 and len(compared) >= 5
    (reported,) = _deltas([collect_run(run, run.name, None, 1.0) for run in runs], list(compared))
    assert {k: list(d.ci) for k, d in reported.items()} == compared
