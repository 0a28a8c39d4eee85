"""`kvbench plan` through the real console entry point: the ranking printed, the chosen deployment replayed with
--target DIR/best.toml, a bad spec as a one-line error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"
SPEC = f"""trace = "{TRACE}"
gpu_budget = 2
slo = "ttft=2000,tpot=100"
[search]
layouts = ["colocated", "pd"]
[halving]
requests = [30, 60]
final = 1
precision = 0.5
final_precision = 0.25
"""


def kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_plan_prints_the_ranking_and_its_preset_replays(tmp_path: Path) -> None:
    spec, out = tmp_path / "plan.toml", tmp_path / "out"
    spec.write_text(SPEC)
    r = kvbench("plan", str(spec), "--out", str(out), "--workers", "1")
    assert r.returncode == 0, r.stderr
    best = json.loads((out / "plan.json").read_text())["best"]
    assert f"chosen: {best} → {out}/best.toml" in r.stdout.replace("\n", "")
    assert "colocated-2xtp1-H100-least_loaded-hbm" in r.stdout and "1p1d-tp1.1-H100.H100" in r.stdout
    run = tmp_path / "run"
    r = kvbench("replay", "--trace", str(TRACE), "--target", str(out / "best.toml"), "-n", "20", "--out", str(run))
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "run.json").read_text())["counts"]["finished"] == 20


def test_bad_plan_spec_is_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "plan.toml"
    spec.write_text(SPEC.replace("gpu_budget = 2", "gpu_budget = 0"))
    r = kvbench("plan", str(spec), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "gpu_budget" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
