"""The opt-in `vllm` marker (tests/conftest.py): left out by any -m expression that does not name it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LIVE = Path(__file__).resolve().parent / "live"
VLLM = {"test_live_vllm.py"}  # the only module marked vllm
OTHERS = {p.name for p in LIVE.glob("test_*.py")} - VLLM


def collected(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(LIVE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=LIVE.parents[1],
    )
    assert r.returncode in (0, 5), r.stdout + r.stderr  # 5: every test deselected
    return {line.split("::")[0].rsplit("/", 1)[-1] for line in r.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize(
    ("args", "files"),
    [
        ((), OTHERS),
        (("-m", "not live"), set()),
        (("-m", "live or vllm"), OTHERS | VLLM),
    ],
)
def test_vllm_runs_only_when_named(args, files):
    assert collected(*args) == files
