"""Opt-in live tier on vLLM's CPU build (marker `vllm`, excluded by default): `pytest -m vllm` after
`python -m kvbench.devservers.vllmcpu install`. Needs ~4 GB of disk and ~1 min to start; never part of CI."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from kvbench.devservers.vllmcpu import vllm_server

pytestmark = pytest.mark.vllm
PROFILE = Path(__file__).resolve().parents[2] / "kvbench" / "presets" / "adapters" / "vllm-local.toml"
BLOCK = 32  # --block-size: vLLM caches whole blocks only


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    with vllm_server(log=tmp_path_factory.mktemp("vllm") / "server.log") as base:
        yield base


def test_vllm_replay_exact_lengths_and_block_cached_tokens(vllm_url, tmp_path):
    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload.load import from_trace

    # Request 1 and 2 share block id 1 (512 tokens); the word-level tokenizer makes 512 words = 512 tokens, so
    # vLLM caches 512 // 32 = 16 whole blocks = 512 tokens for request 2 (and request 0 has nothing cached).
    rows = [([7, 8], 600, 12), ([1, 9], 700, 20), ([1, 10], 700, 16)]
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 1500 * i, "input_length": n, "output_length": out, "hash_ids": ids}) + "\n"
            for i, (ids, n, out) in enumerate(rows)
        )
    )
    spec = resolve(str(PROFILE), [f"base_url={vllm_url}/v1"])
    run_dir, stats = execute(from_trace(trace), spec, RunOptions(seed=0, out=tmp_path / "run"))
    assert stats.finished == 3
    got = (
        duckdb.connect()
        .sql(
            f"SELECT req_id, tokens, cached_tokens FROM read_parquet('{run_dir}/events/*.parquet') "
            f"WHERE kind = 'FINISH' ORDER BY req_id"
        )
        .fetchall()
    )
    assert [(r, t) for r, t, _ in got] == [(0, 12), (1, 20), (2, 16)]
    assert got[0][2] == 0 and got[1][2] == 0 and got[2][2] == 512 // BLOCK * BLOCK
