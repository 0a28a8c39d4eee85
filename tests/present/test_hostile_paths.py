"""Run paths full of quotes, SQL and HTML reach every command that reads runs as values, never as code (issue 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = str(Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl")
HOSTILE = "o'brien'); COPY (SELECT 1) TO 'pwned.csv' (HEADER); -- <img src=x onerror=alert(1)> [1]*?"


def _kvbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    run = base / HOSTILE
    done = _kvbench(base, "replay", "--trace", SAMPLE, "--target", "sim", "-n", "40", "-q", "--out", str(run))
    assert done.returncode == 0, done.stderr
    return run


COMMANDS = {
    "summary": ["summary", "RUN"],
    "sql": ["sql", "RUN", "SELECT count(*) FROM requests"],
    "report html": ["report", "RUN", "-o", "r.html"],
    "report md": ["report", "RUN", "--format", "md", "-o", "r.md"],
    "compare": ["compare", "RUN", "RUN"],
    "gate": ["gate", "--baseline", "RUN", "--candidate", "RUN", "--rules", "rules.toml", "--markdown", "gate.md"],
    "timeline": ["timeline", "RUN", "-o", "t.json"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_hostile_run_path_is_data(name, hostile_run, tmp_path):
    args = [str(hostile_run) if a == "RUN" else a for a in COMMANDS[name]]
    (tmp_path / "rules.toml").write_text('[[rule]]\nmetric = "ttft_ms"\nstatistic = "p50"\ntolerance_pct = 5\n')
    done = _kvbench(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("pwned.csv")) and not list(hostile_run.parent.rglob("pwned.csv"))
    for written in ("r.html", "gate.md"):
        if (tmp_path / written).exists():
            assert "<img src=x" not in (tmp_path / written).read_text()
    if name == "sql":
        assert "40" in done.stdout
