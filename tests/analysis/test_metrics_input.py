"""Bad input to the metrics commands: one-line ConfigErrors naming what and where, exit code 2 from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.metrics_logs import real_run

from kvbench.analysis.metrics import open_runs
from kvbench.config import ConfigError


@pytest.fixture
def run(tmp_path):
    return real_run(tmp_path / "r")


def _one_line_error(runs, *words):
    with pytest.raises(ConfigError) as e:
        open_runs(runs)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_missing_dir_and_missing_run_json(tmp_path, run):
    _one_line_error([tmp_path / "nope"], "nope", "no such run directory")
    (run / "run.json").unlink()
    _one_line_error([run], str(run), "no run.json")


def test_glob_matching_nothing(tmp_path):
    _one_line_error([str(tmp_path / "runs-*")], "runs-*", "no run directory (with a run.json) matches")


def test_glob_keeps_only_run_directories(tmp_path, run):
    (tmp_path / "baselines").mkdir()  # a folder beside the runs that is not a run
    con = open_runs([str(tmp_path / "*")])
    assert con.execute("SELECT DISTINCT run FROM events").fetchall() == [("r",)]


def test_truncated_parquet(run):
    part = next((run / "events").glob("*.parquet"))
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    _one_line_error([run], str(part), "not a readable Parquet file")


def test_foreign_parquet(run):
    pq.write_table(pa.table({"a": [1, 2]}), run / "events" / "zz-foreign.parquet")
    _one_line_error([run], "zz-foreign.parquet", "not a kvbench events table", "'t_ns'")


def test_wrong_column_type(run):
    pq.write_table(
        pa.table({"req_id": pa.array(["x"]), "session_id": [1], "turn": pa.array([0], pa.int32())}),
        run / "requests" / "zz.parquet",
    )
    _one_line_error([run], "zz.parquet", "requests")


def test_schema_version_mismatch(tmp_path, run):
    other = real_run(tmp_path / "other")
    m = json.loads((other / "run.json").read_text())
    m["schema_version"] = 99
    (other / "run.json").write_text(json.dumps(m))
    _one_line_error([run, other], "other/run.json", "schema_version 99")


def test_run_json_not_json(run):
    (run / "run.json").write_text("{not json")
    _one_line_error([run], "run.json", "not valid JSON")


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_cli_bad_input_exits_2_with_one_line(tmp_path, run):
    (run / "run.json").unlink()
    p = _cli("summary", str(run))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no run.json" in p.stderr
    p = _cli("sql", str(tmp_path / "r2-*"), "SELECT 1")
    assert p.returncode == 2 and "no run directory (with a run.json) matches" in p.stderr


def test_cli_sql_query_error_exits_2(run):
    p = _cli("sql", str(run), "SELECT nope FROM events")
    assert p.returncode == 2 and p.stderr.startswith("kvbench: error: query failed") and p.stderr.count("\n") == 1
    p = _cli("summary", str(run), "--slo", "ttft=fast")
    assert p.returncode == 2 and "cannot parse 'ttft=fast'" in p.stderr
