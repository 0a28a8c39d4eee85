"""A run that fails, before or during the replay, ends with run.json status `failed` and a one-line `error`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import duckdb
import pytest

from kvbench.config import ConfigError
from kvbench.eventlog import table_glob
from kvbench.fixed_target import FixedTarget
from kvbench.records import FINISH, Request
from kvbench.run import RunOptions, execute, load_run
from kvbench.target import Registration, TargetSpec
from kvbench.targets import TARGETS, resolve
from kvbench.workload.load import Workload

MS = 1_000_000
CLI = [sys.executable, "-c", "from kvbench.cli.app import main; main()"]


def _requests(n: int) -> list[Request]:
    return [Request(i, i * 10 * MS, 64, 3) for i in range(n)]


def _manifest(run_dir) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _kinds(run_dir) -> dict[str, int]:
    rows = duckdb.connect().execute(f"SELECT kind, count(*) FROM read_parquet('{table_glob(run_dir)}') GROUP BY 1")
    return dict(rows.fetchall())


def _broken_at_build(spec, ctx):
    raise RuntimeError("cannot reach the cluster\nsecond line of the reason")


class _FailsAfterThreeFinishes(FixedTarget):
    """The fixed target, whose run raises while handling its third FINISH (a bug, a lost connection)."""

    def run(self, emit):
        done = []

        def counting(ev):
            emit(ev)
            if ev[2] == FINISH:
                done.append(ev)
            if len(done) == 3:
                raise RuntimeError("lost the device")

        super().run(counting)


@pytest.mark.parametrize(
    "factory, error",
    [
        (_broken_at_build, "RuntimeError: cannot reach the cluster second line of the reason"),
        (_FailsAfterThreeFinishes, "RuntimeError: lost the device"),
    ],
)
def test_a_target_that_raises_leaves_a_failed_run_with_its_reason(tmp_path, monkeypatch, factory, error):
    monkeypatch.setitem(TARGETS, "flaky", Registration(factory))
    wl = Workload("w", "mem", "0", lambda: iter(_requests(10)))
    with pytest.raises(RuntimeError):
        execute(wl, TargetSpec("flaky", "flaky", {}), RunOptions(out=tmp_path / "r"))
    m = load_run(tmp_path / "r")
    assert (m["status"], m["error"]) == ("failed", error)  # not "running", which reads as killed


def test_what_a_failed_run_measured_stays_readable(tmp_path, monkeypatch):
    monkeypatch.setitem(TARGETS, "flaky", Registration(_FailsAfterThreeFinishes))
    wl = Workload("w", "mem", "0", lambda: iter(_requests(10)))
    with pytest.raises(RuntimeError):
        execute(wl, TargetSpec("flaky", "flaky", {}), RunOptions(out=tmp_path / "r"))
    # requests 0, 1, 2 end at 70, 80, 90 ms; by then 0..9 (released every 10 ms up to 90 ms) have arrived
    assert _kinds(tmp_path / "r")["FINISH"] == 3 and _manifest(tmp_path / "r")["counts"]["finished"] == 3


def _failing_stream(good: int) -> Iterator[Request]:
    """A lazily read trace whose line good + 1 is bad: requests 0 .. good - 1, then a ConfigError."""
    yield from _requests(good)
    raise ConfigError(f"trace.jsonl:{good + 1}: field 'input_length': expected a number, got 'x'")


def test_a_workload_that_fails_mid_run_fails_the_run(tmp_path):
    # closed loop, 2 in flight: the stream is read as requests end, so line 6 is read after 0..3 finished
    wl = Workload("w", "mem", "0", lambda: _failing_stream(5))
    with pytest.raises(ConfigError):
        execute(wl, resolve("fixed"), RunOptions(concurrency=2, out=tmp_path / "r"))
    m = _manifest(tmp_path / "r")
    assert (m["status"], m["error"]) == ("failed", "trace.jsonl:6: field 'input_length': expected a number, got 'x'")
    assert (m["counts"]["submitted"], m["counts"]["finished"]) == (5, 4) and _kinds(tmp_path / "r")["FINISH"] == 4


def test_a_workload_that_fails_before_the_first_release_fails_the_run(tmp_path):
    # open loop: the replayer reads ahead before anything is due, and meets the bad line there
    wl = Workload("w", "mem", "0", lambda: _failing_stream(500))
    with pytest.raises(ConfigError):
        execute(wl, resolve("fixed"), RunOptions(out=tmp_path / "r"))
    m = _manifest(tmp_path / "r")
    assert (m["status"], m["counts"]["submitted"]) == ("failed", 500) and m["error"].startswith("trace.jsonl:501:")


def _mooncake(path, lines: list[str]):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_cli_runs_that_fail_while_streaming_the_trace_say_so_in_run_json(tmp_path, conversation_trace):
    good = conversation_trace.read_text().splitlines()[:500]
    bad = _mooncake(tmp_path / "bad.jsonl", [*good, '{"timestamp": 999999999, "input_length": "x"}'])
    cases = [
        (["--trace", str(bad), "-c", "4"], f"{bad}:501: field 'input_length': expected a number, got 'x'"),
        (["--trace", str(conversation_trace), "--rate", "1e-6"], "request 27 would arrive at 3.16e+07 s"),
    ]
    for k, (args, reason) in enumerate(cases):
        out = tmp_path / f"r{k}"
        r = subprocess.run([*CLI, "replay", *args, "--target", "fixed", "--out", str(out), "-q"], **_text())
        assert r.returncode == 2 and "Traceback" not in r.stderr and reason in r.stderr, r.stderr
        m = load_run(out)
        assert m["status"] == "failed" and reason in m["error"], m


def _text() -> dict:
    return {"capture_output": True, "text": True, "timeout": 120}


def _refuses_with_the_url(spec, ctx):
    raise ConfigError(f"{spec.params['base_url']}: refused; key {spec.params['headers']['Authorization']}")


def test_a_failure_message_never_shows_a_secret(tmp_path, monkeypatch):
    monkeypatch.setitem(TARGETS, "leaky", Registration(_refuses_with_the_url))
    params = {"base_url": "http://u:pw-5150@h:1/v1", "headers": {"Authorization": "Bearer sk-0xdeadbeef"}}
    wl = Workload("w", "mem", "0", lambda: iter(_requests(2)))
    with pytest.raises(ConfigError) as raised:
        execute(wl, TargetSpec("leaky", "leaky", params), RunOptions(out=tmp_path / "r"))
    told = "http://<redacted>@h:1/v1: refused; key <redacted>"
    assert (str(raised.value), load_run(tmp_path / "r")["error"]) == (told, told)
