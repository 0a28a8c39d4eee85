"""The vLLM-shaped result JSON's statistics, by hand and against numpy on the expanded values."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.present import fmt
from kvbench.present.vllm_result import _stats, file_name

MS = 1_000_000


def test_weighted_stats_match_numpy_on_the_expanded_values():
    # ITL comes grouped: value v counted n times; 1, 2, 2, 3 ms by hand: mean 2, median 2, std sqrt(0.5)
    s = _stats([3 * MS, 1 * MS, 2 * MS], [1, 1, 2], [25.0, 99.0])
    assert (s["mean"], s["median"]) == (2.0, 2.0) and s["std"] == pytest.approx(0.5**0.5)
    assert s["25.0"] == pytest.approx(1.75)  # rank 0.75 between 1 and 2
    rng = np.random.default_rng(1)
    values, weights = rng.integers(1, 10**8, 40), rng.integers(1, 5, 40)
    expanded = np.repeat(values, weights)
    got = _stats(values.tolist(), weights.tolist(), [50.0, 90.0, 99.9])
    for p in (50.0, 90.0, 99.9):
        assert got[str(p)] == pytest.approx(np.percentile(expanded, p) / MS)
    assert got["std"] == pytest.approx(np.std(expanded) / MS) and got["mean"] == pytest.approx(expanded.mean() / MS)


def test_empty_distribution_reads_zero_as_vllms():
    assert _stats([], [], [99.0]) == {"mean": 0.0, "median": 0.0, "std": 0.0, "99.0": 0.0}


def test_file_name_is_vllms_pattern():
    doc = {"backend": "openai", "request_rate": 10.0, "model_id": "meta-llama/Llama-3.1-8B", "date": "20260101-000000"}
    assert file_name(doc, None) == "openai-10.0qps-Llama-3.1-8B-20260101-000000.json"
    assert (
        file_name({**doc, "request_rate": "inf"}, 32) == "openai-infqps-concurrency32-Llama-3.1-8B-20260101-000000.json"
    )


def test_byte_counts_are_human_readable():
    assert [fmt.nbytes(n) for n in (0, 999, 1000, 67_108_864_000, 187_899_576_320)] == [
        "0 B", "999 B", "1 kB", "67.1 GB", "188 GB",
    ]  # fmt: skip
    assert fmt.nbytes(None) == fmt.DASH
