"""Shared fixtures (the public traces beside the repo, ../shared/traces, which CI provides and tests must not skip)
and the opt-in rule of the `vllm` marker."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from kvbench.devservers.llamacpp import find_binary

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"


def pytest_configure(config: pytest.Config) -> None:
    # A script that starts the suite as a background job (`pytest ... &`, no job control) hands it SIGINT ignored,
    # and every replay it starts inherits that; the Ctrl-C tests need SIGINT to arrive as it does at a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stop in the first seconds, naming every missing prerequisite of the selected tests (README, Set up), rather
    than failing them one by one minutes later. Tests that need Chromium say so in their name."""
    items = session.items
    missing = []
    if not SHARED_TRACES.is_dir() and any("traces_dir" in item.fixturenames for item in items):
        missing.append(f"the public traces in {SHARED_TRACES}: clone kvbench beside shared/")
    if find_binary() is None and any(item.get_closest_marker("live") for item in items):
        missing.append("llama-server: python -m kvbench.devservers.llamacpp build (needs cmake, make, g++)")
    if shutil.which("chromium") is None and any("chromium" in item.name for item in items):
        missing.append("chromium: apt-get install chromium")
    if missing and not session.config.option.collectonly:
        pytest.exit("missing prerequisites (or deselect their tests, e.g. -m 'not live'): " + "; ".join(missing))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `vllm` run only when the -m expression names vllm (`-m vllm`, `-m "live or vllm"`): any other
    selection, `-m "not live"` included, leaves them out (an addopts `-m 'not vllm'` would be replaced by it)."""
    if "vllm" in (config.getoption("markexpr") or ""):
        return
    opted_out = [item for item in items if item.get_closest_marker("vllm")]
    if opted_out:
        config.hook.pytest_deselected(items=opted_out)
        items[:] = [item for item in items if not item.get_closest_marker("vllm")]
