"""kvbench as an installed package: presets ship inside it, local folders override them, imports find the real one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from kvbench.targets import adapter_dirs, find_adapter, resolve
from kvbench.workload import load
from kvbench.workload.inputs import find_workload, workload_dirs

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "kvbench" / "presets"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_presets_are_looked_up_in_the_cwd_then_in_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert adapter_dirs() == [tmp_path / "adapters", PRESETS / "adapters"]
    assert workload_dirs() == [tmp_path / "workloads", PRESETS / "workloads"]
    assert find_adapter("pd-2p2d") == PRESETS / "adapters" / "pd-2p2d.toml"
    assert find_workload("kimi-sample") == PRESETS / "workloads" / "kimi-sample.toml"


def test_a_local_folder_overrides_a_shipped_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adapters").mkdir()
    (tmp_path / "workloads").mkdir()
    shipped = (PRESETS / "adapters" / "pd-2p2d.toml").read_text()
    (tmp_path / "adapters" / "pd-2p2d.toml").write_text(shipped)
    (tmp_path / "workloads" / "kimi-sample.toml").write_text('kind = "synthetic"\nrequests = 7\n')
    assert find_adapter("pd-2p2d") == tmp_path / "adapters" / "pd-2p2d.toml"
    assert resolve("sim").source == str(tmp_path / "adapters" / "pd-2p2d.toml")
    assert len(list(load.select(None, "kimi-sample", seed=0).make())) == 7  # the shipped spec has 1,500


def test_headline_command_runs_from_an_empty_directory(tmp_path):
    r = cli("trace", "gen", "kimi-sample", "-o", "kimi.jsonl", "-n", "40", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("replay", "--trace", "kimi.jsonl", "--target", "sim", "--out", "run", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kimi.jsonl", "run"]


def test_import_from_the_folder_holding_a_checkout_named_kvbench(tmp_path):
    """A checkout called kvbench/ in the cwd is a folder without __init__.py: Python's path finder makes it a
    namespace package unless the installed package is found on sys.path first (see pyproject's package-dir)."""
    (tmp_path / "kvbench").mkdir()
    (tmp_path / "kvbench" / "pyproject.toml").write_text('[project]\nname = "kvbench"\n')
    code = "import kvbench; print(kvbench.__version__, kvbench.__file__)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    version, where = r.stdout.split()
    assert version == (REPO / "kvbench" / "version.py").read_text().split('__version__ = "')[1].split('"')[0]
    assert Path(where).name == "__init__.py" and Path(where).parent.name == "kvbench"


def _tracked_files() -> list[str]:
    r = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    return [p for p in r.stdout.split("\0") if p and (REPO / p).is_file()]  # a file moved in the work tree: gone


def test_wheel_holds_every_data_file_of_the_package(tmp_path):
    """Built from a copy of the tracked files, as a fresh clone would be (an in-tree build leaves build/ behind)."""
    src, out = tmp_path / "src", tmp_path / "dist"
    for name in _tracked_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("kvbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {n for n in _tracked_files() if n.startswith("kvbench/")}
    data = {n for n in package if not n.endswith(".py")}
    assert {f"kvbench/presets/adapters/{n}.toml" for n in ("pd-2p2d", "openai", "llamacpp-local")} <= data
    assert {"kvbench/presets/workloads/kimi-sample.toml", "kvbench/sim/catalog/models.toml"} <= data
    assert package - names == set()
    assert not [n for n in names if n.startswith(("tests/", "traces/", "reports/", "docs/"))]
