"""The Python API (kvbench.replay, kvbench.open_runs, Run): runs and figures a notebook gets without the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvbench
from kvbench.cli.app import app
from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.workload.load import Workload

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "traces" / "kimi-sample.jsonl"
MS = 1_000_000
COLUMNS = {"run", "req_id", "arrival_ns", "status", "reason", "ttft_ns", "tpot_ns", "e2e_ns", "lag_ns", "good"}


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> kvbench.Run:
    return kvbench.replay(TRACE, "sim", max_requests=40, out=tmp_path_factory.mktemp("api") / "sim")


def test_sim_replay_gives_a_run_whose_summary_is_the_cli_summary(sim_run: kvbench.Run):
    doc = sim_run.summary()
    assert doc["metrics"]["requests"] == 40
    assert sim_run.status == "complete"
    written = json.loads((sim_run.path / "summary.json").read_text())["metrics"]  # as after `kvbench replay`
    assert _differing(written, doc["metrics"]) == []
    res = CliRunner().invoke(app, ["summary", str(sim_run.path), "--json"])
    assert res.exit_code == 0, res.output
    assert _differing(json.loads(res.stdout)["metrics"], doc["metrics"]) == []


def _differing(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """The keys whose values differ (the whole dicts are too long to read in a failure message)."""
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def test_per_request_has_one_row_per_request_with_the_documented_columns(sim_run: kvbench.Run):
    df = sim_run.per_request()
    assert len(df) == 40
    assert COLUMNS <= set(df.columns)
    assert (df["status"] == "FINISH").all()
    assert df["arrival_ns"].is_monotonic_increasing
    table = sim_run.arrow()
    assert table.num_rows == 40
    assert table.column_names == list(df.columns)
    assert table.column("ttft_ns").to_pylist() == df["ttft_ns"].tolist()


def test_fixed_target_ttft_is_the_configured_constant(tmp_path: Path):
    # fixed: the first token 50 ms after arrival, then one every 10 ms; servers=0 means no queueing at all.
    run = kvbench.replay(TRACE, "fixed:ttft_ms=50,itl_ms=10,servers=0", max_requests=10, out=tmp_path / "fixed")
    df = run.per_request()
    assert len(df) == 10
    assert (df["ttft_ns"] == 50_000_000).all()
    assert run.summary()["metrics"]["ttft_ms.p50"] == 50.0


def test_overrides_as_a_dict_or_as_k_eq_v_items_give_the_same_target(tmp_path: Path):
    a = kvbench.replay(TRACE, "fixed", max_requests=5, out=tmp_path / "a", overrides={"ttft_ms": 20, "servers": 0})
    b = kvbench.replay(TRACE, "fixed", max_requests=5, out=tmp_path / "b", overrides=["ttft_ms=20", "servers=0"])
    assert a.manifest["target"]["params"] == b.manifest["target"]["params"]
    assert (a.per_request()["ttft_ns"] == 20_000_000).all()


def test_open_runs_gives_every_run_in_order(sim_run: kvbench.Run, tmp_path: Path):
    other = kvbench.replay(TRACE, "fixed:servers=0", max_requests=3, out=tmp_path / "other")
    runs = kvbench.open_runs([other.path, sim_run.path])
    assert [r.path for r in runs] == [other.path, sim_run.path]
    assert [len(r.per_request()) for r in runs] == [3, 40]
    assert [r.path for r in kvbench.open_runs(str(tmp_path / "oth*"))] == [other.path]


def test_errors_are_config_errors(sim_run: kvbench.Run, tmp_path: Path):
    with pytest.raises(ConfigError, match="already holds a run"):
        kvbench.replay(TRACE, "sim", max_requests=5, out=sim_run.path)
    with pytest.raises(ConfigError, match="unknown target"):
        kvbench.replay(TRACE, "no-such-profile", max_requests=5, out=tmp_path / "x")
    with pytest.raises(ConfigError, match="not a kvbench run"):
        kvbench.open_runs([tmp_path])


def test_a_workload_spec_by_name(tmp_path: Path):
    run = kvbench.replay("kimi-sample", "fixed:servers=0", max_requests=7, out=tmp_path / "spec")
    assert run.manifest["workload"]["name"] == "kimi-sample"
    assert len(run.per_request()) == 7


def test_readme_example_runs_as_shown(tmp_path: Path):
    # README's "Python API" block, with its run directory in tmp_path.
    out = tmp_path / "notebook"
    code = README_EXAMPLE.replace("reports/notebook", str(out))
    assert code != README_EXAMPLE
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
    assert json.loads((out / "summary.json").read_text())["metrics"]["requests"] == 40


def test_import_kvbench_loads_no_pandas_duckdb_or_pyarrow():
    code = "import sys, kvbench; print(sorted(m for m in ('pandas', 'duckdb', 'pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]"


def _readme_example() -> str:
    text = (REPO / "README.md").read_text()
    block = text.split("## Python API", 1)[1].split("```python\n", 1)[1]
    return block.split("```", 1)[0]


README_EXAMPLE = _readme_example()


def test_closed_loop_users_send_when_their_previous_answer_ends(tmp_path: Path):
    # 6 requests due at 1 s apart, 3 tokens each; fixed: 50 ms to the first token, 10 ms a token, so 70 ms each.
    # 2 users, no think time: arrival times are ignored and each user sends when its previous answer ends.
    reqs = [Request(i, i * 1_000_000_000, 10, 3) for i in range(6)]
    wl = Workload("six", "mem", "0", lambda: iter(reqs))
    run = kvbench.replay(wl, "fixed:ttft_ms=50,itl_ms=10,servers=0", users=2, out=tmp_path / "c")
    assert sorted(run.per_request()["arrival_ns"]) == [0, 0, 70 * MS, 70 * MS, 140 * MS, 140 * MS]
    assert run.manifest["closed_loop"]
    with pytest.raises(ConfigError, match="users"):
        kvbench.replay(wl, "sim", users=2, rate=5.0, out=tmp_path / "bad")
