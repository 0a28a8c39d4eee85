"""Shared fixtures: the public traces beside the repo (../shared/traces), which CI provides and tests must not skip."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """../shared/traces; a missing folder is a failure, not a skip (CI always has it beside the clone)."""
    assert SHARED_TRACES.is_dir(), f"{SHARED_TRACES} missing: clone kvbench beside shared/ (see README)"
    return SHARED_TRACES


@pytest.fixture(scope="session")
def conversation_trace(traces_dir: Path) -> Path:
    return traces_dir / "conversation_trace.jsonl"


@pytest.fixture(scope="session")
def synthetic_trace(traces_dir: Path) -> Path:
    return traces_dir / "synthetic_trace.jsonl"
