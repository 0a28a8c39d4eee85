"""`kvbench kv-transfer` end to end through the CLI entry point (subprocess, so exit codes and stderr are real)."""

from __future__ import annotations

import json
import subprocess
import sys


def kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_json_one_link_request_granularity() -> None:
    r = kvbench(
        "kv-transfer",
        "--model",
        "Llama-3-70B",
        "--tokens",
        "8k",
        "--link",
        "roce-mooncake",
        "--granularity",
        "request",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # 8000 tokens * 327,680 B = 2,621,440,000 B in one message; 415,000 ns + 2,621,440,000 / 139.2e9 s
    #   = 415,000 + 18,832,183.9 ns
    (row,) = doc["links"]
    assert doc["kv_bytes"] == row["kv_bytes"] == 2_621_440_000
    assert (row["messages"], row["bytes_per_message"]) == (1, 2_621_440_000)
    assert row["transfer_ns"] == 415_000 + 18_832_183
    assert row["regime"] == "bandwidth-bound"
    assert row["crossover_bytes"] == 57_768_000  # 415 us * 139.2 GB/s


def test_json_all_links_layer_block_is_rtt_bound_on_nvlink() -> None:
    r = kvbench("kv-transfer", "-m", "Llama-3.1-8B", "-n", "7500", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["link"]: row for row in json.loads(r.stdout)["links"]}
    assert {"nvlink-h100", "nvlink-a100", "ib-h100", "rdma-mooncake", "roce-mooncake", "pcie5", "tcp"} <= set(rows)
    nv = rows["nvlink-h100"]
    # 469 blocks * 32 layers = 15,008 messages of ~64 KiB: 15,008 * 5.5 us = 82.544 ms of RTT vs 2.88 ms of wire
    assert nv["messages"] == 15_008 and nv["latency_ns"] == 82_544_000 and nv["regime"] == "rtt-bound"


def test_table_for_all_tiers() -> None:
    r = kvbench("kv-transfer", "--model", "DeepSeek-V3", "--tokens", "4096", "--granularity", "layer")
    assert r.returncode == 0, r.stderr
    assert "68.625 KiB/token" in r.stdout
    for tier in ("nvlink-h100", "ib-h100", "roce-mooncake", "tcp"):
        assert tier in r.stdout


def test_bad_input_exits_2_with_one_line() -> None:
    for args, msg in [
        (("-m", "GPT-5", "-n", "10"), "--model: unknown model 'GPT-5'; known: Llama-3.1-8B"),
        (("-m", "Qwen3-8B", "-n", "10", "-l", "ib"), "--link: unknown link 'ib'; known: nvlink-h100"),
        (
            ("-m", "Qwen3-8B", "-n", "10", "-g", "page"),
            "--granularity: 'page' is not one of 'layer-block', 'layer', 'request'.",
        ),
        (("-m", "Qwen3-8B", "-n", "0"), "--tokens (0) and --block-tokens (16) must be >= 1"),
    ]:
        r = kvbench("kv-transfer", *args)
        assert r.returncode == 2
        assert r.stderr.startswith("kvbench: error: ") and msg in r.stderr and r.stderr.count("\n") == 1
