"""Fixtures for the live tier: a real llama-server on the tiny model (imported by tests/test_live_*.py).

The binary must already be built (`python -m kvbench.devservers.llamacpp build`, done by .ci/run): a missing binary
is an error naming that command, never a skip, so CI cannot pass without having run the live tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.devservers.llamacpp import llama_server, require_binary
from kvbench.devservers.tinymodel import tiny_model_path


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory):
    """Base URL (http://127.0.0.1:PORT, no /v1) of a fresh llama-server for this test module; its log is kept."""
    require_binary()
    log: Path = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llama_server(tiny_model_path(), log=log) as base:
        yield base
