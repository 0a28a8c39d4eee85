"""The one runner: any registered target, its prepare step before t0, run.json, and the --workers checks."""

from __future__ import annotations

import json
import re

import pytest

from kvbench.config import ConfigError
from kvbench.fixed_target import FixedTarget
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.target import Registration, TargetSpec
from kvbench.targets import TARGETS, resolve
from kvbench.workload.load import Workload

MS = 1_000_000


def _workload() -> Workload:
    reqs = [Request(i, i * 100 * MS, 10, 3) for i in range(4)]
    return Workload("w", "mem", "0", lambda: iter(reqs))


def test_a_registered_kind_runs_with_its_prepare_step(tmp_path, monkeypatch):
    # a new kind registers a factory and a prepare step; the runner calls prepare once, records what it returns
    # and builds the target from it (here: the fixed target with the ITL that prepare filled in)
    prepared = []

    def prepare(spec: TargetSpec) -> TargetSpec:
        prepared.append(spec.name)
        return TargetSpec(spec.kind, spec.name, {**spec.params, "itl_ms": 20}, spec.source)

    monkeypatch.setitem(TARGETS, "slowfixed", Registration(FixedTarget, prepare))
    spec = TargetSpec("slowfixed", "s", {"ttft_ms": 50})
    run_dir, stats = execute(_workload(), spec, RunOptions(out=tmp_path / "run"))
    assert prepared == ["s"] and (stats.status, stats.finished) == ("complete", 4)
    m = json.loads((run_dir / "run.json").read_text())
    assert m["target"]["params"] == {"ttft_ms": 50, "itl_ms": 20} and m["target"]["kind"] == "slowfixed"
    # TTFT 50 + 2 gaps of 20 ms: the last request (released at 300 ms) ends at 390 ms
    assert m["counts"]["last_t_ns"] == 390 * MS and m["status"] == "complete"
    assert "workers" not in m and "client_lag" not in m  # virtual time, one process


@pytest.mark.parametrize(
    "target, opts, message",
    [
        ("fixed", RunOptions(workers=2), "--workers shards real-time targets; target 'fixed' (fixed) runs in virtual"),
        ("sim", RunOptions(workers=3), "target 'pd-2p2d' (sim) runs in virtual time"),
        ("http://127.0.0.1:1/v1", RunOptions(workers=0), "--workers must be >= 1, got 0"),
        ("http://127.0.0.1:1/v1", RunOptions(workers=4, concurrency=3), "--concurrency 3 must be >= --workers 4"),
    ],
)
def test_worker_options_are_checked_before_anything_runs(tmp_path, target, opts, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        execute(_workload(), resolve(target), RunOptions(opts.seed, opts.concurrency, tmp_path / "r", opts.workers))
    assert not (tmp_path / "r").exists()  # no probe, no run directory


def test_unknown_kind_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown target kind 'nope'; known: sim, openai, fixed"):
        execute(_workload(), TargetSpec("nope", "n"), RunOptions(out=tmp_path / "r"))
