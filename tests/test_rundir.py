"""Runs never mix: a non-empty --out is refused (one line, exit 2) unless --overwrite, which replaces it whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from kvbench.config import ConfigError
from kvbench.eventlog import table_glob
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000
CLI = [sys.executable, "-c", "from kvbench.cli.app import main; main()"]


def _workload(n: int) -> Workload:
    reqs = [Request(i, i * 10 * MS, 64, 3) for i in range(n)]
    return Workload("w", "mem", "0", lambda: iter(reqs))


def _kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _requests_in(run_dir: Path) -> int:
    return (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet('{table_glob(run_dir, 'requests')}')")
        .fetchone()[0]
    )


def test_a_second_run_into_the_same_out_is_refused_and_the_first_kept(tmp_path):
    out = tmp_path / "run"
    execute(_workload(12), resolve("sim"), RunOptions(out=out))  # a sim run: events, requests and steps/
    with pytest.raises(ConfigError, match="already holds a run; pass --overwrite to replace it"):
        execute(_workload(5), resolve("fixed"), RunOptions(out=out))
    assert _requests_in(out) == 12 and json.loads((out / "run.json").read_text())["counts"]["submitted"] == 12


def test_overwrite_replaces_the_old_run_whole(tmp_path):
    out = tmp_path / "run"
    execute(_workload(12), resolve("sim"), RunOptions(out=out))
    assert (out / "steps").is_dir()
    execute(_workload(5), resolve("fixed"), RunOptions(out=out, overwrite=True))
    # nothing of the sim run is left: its steps/ went with it, parts are the new run's only
    assert sorted(p.name for p in out.iterdir()) == ["events", "request_parts", "requests", "run.json"]
    assert _requests_in(out) == 5 and json.loads((out / "run.json").read_text())["counts"]["finished"] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # the old run, renamed aside, is deleted


def test_overwrite_never_deletes_what_is_not_a_run(tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    with pytest.raises(ConfigError, match="holds files that are not a run; --overwrite replaces only kvbench output"):
        execute(_workload(3), resolve("fixed"), RunOptions(out=out, overwrite=True))
    assert (out / "thesis.tex").read_text() == "keep me"


def test_an_empty_out_directory_is_used(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    run_dir, stats = execute(_workload(3), resolve("fixed"), RunOptions(out=out))
    assert run_dir == out and stats.finished == 3


def test_cli_refuses_a_run_directory_a_file_and_resume_in_one_line(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": i, "input_length": 8, "output_length": 2}) + "\n" for i in range(5))
    )
    out = tmp_path / "run"
    base = ["replay", "--trace", str(trace), "--target", "fixed", "-q", "--out"]
    assert _kvbench(*base, str(out)).returncode == 0
    cases = {
        (str(out),): f"kvbench: error: --out {out}: already holds a run; pass --overwrite to replace it or choose "
        "another directory (--resume is not supported)",
        (str(trace),): f"kvbench: error: --out {trace}: exists and is not a directory",
        (str(out), "--resume"): "kvbench: error: --resume is not supported: a run cannot be continued; replay into "
        "a new --out or pass --overwrite",
    }
    for extra, message in cases.items():
        r = _kvbench(*base, *extra)
        assert (r.returncode, r.stderr) == (2, message + "\n")
    r = _kvbench(*base, str(out), "--overwrite")
    assert r.returncode == 0, r.stderr
    assert _requests_in(out) == 5  # one run, not two mixed (10)


def test_goodput_out_is_refused_when_not_empty_and_replaced_with_overwrite(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": 100 * i, "input_length": 8, "output_length": 2}) + "\n" for i in range(4))
    )
    out = tmp_path / "gp"
    cmd = ["goodput", "--trace", str(trace), "--target", "fixed:servers=1", "--slo", "ttft=1000", "--out", str(out)]
    cmd += ["--precision", "0.5"]
    assert _kvbench(*cmd).returncode == 0
    first = sorted(p.name for p in out.iterdir())
    r = _kvbench(*cmd)
    assert (r.returncode, r.stderr) == (
        2,
        f"kvbench: error: --out {out}: already holds a goodput search; pass --overwrite to replace it or choose "
        "another directory (--resume is not supported)\n",
    )
    r = _kvbench(*cmd, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == first  # the same search again, nothing of the first left over
