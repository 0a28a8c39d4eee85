"""Input errors that are found before the run's machinery (pyarrow, pandas, duckdb, the replay loop) is imported."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "pandas", "duckdb", "numpy", "kvbench.replayer", "kvbench.cli.replay_run")
# Runs the CLI in-process and, on the way out, prints which heavy modules had been imported by then.
PROBE = (
    "import sys\n"
    "from kvbench.cli.app import main\n"
    "try:\n"
    "    main()\n"
    "finally:\n"
    f"    print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
)


def test_missing_trace_is_one_line_naming_the_sample_before_heavy_imports(tmp_path):
    cmd = [sys.executable, "-c", PROBE, "replay", "--trace", "kimi.jsonl", "--target", "sim"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "kvbench: error: kimi.jsonl: no such file (the sample trace is traces/kimi-sample.jsonl in a checkout; "
        "`kvbench trace gen kimi-sample -o kimi.jsonl` writes it)"
    ]
    assert r.stdout.strip() == "[]"
    assert not (tmp_path / "reports").exists()


def test_a_directory_as_trace_is_named_early_too(tmp_path):
    cmd = [sys.executable, "-c", PROBE, "replay", "--trace", str(tmp_path)]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{tmp_path}: is a directory, expected a trace file" in r.stderr
    assert r.stdout.strip() == "[]"
