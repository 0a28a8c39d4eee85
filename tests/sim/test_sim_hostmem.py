"""HBM <-> node DRAM over the host link: preemption by swap and P->D KV landing in the decode node's DRAM."""

from __future__ import annotations

import pytest
from support.sim_helpers import by_kind, colocated, pd, run_sim

from kvbench.config import ConfigError
from kvbench.records import Event, Request
from kvbench.sim.cluster import parse_cluster

# pcie5: 5 us per message round, one in flight, 64 GB/s x 0.85 = 54.4 GB/s. Llama-3.1-8B: 131,072 B a token, and
# one message per layer (32) at the default granularity: 160,000 ns of latency per copy.
PCIE_LATENCY_NS = 32 * 5_000


def tiny(preempt: str, swap_gib: float = 4.0) -> list[Event]:
    """Two requests of 300 in + 400 out on a GPU with 1,056 tokens of KV: the later one is preempted."""
    gpu = {"flops_per_s": 989e12, "hbm_bytes": 18_000_000_000, "hbm_bytes_per_s": 3.35e12}
    params = colocated(prefix_caching=False)
    params["pools"]["main"].update(gpu=gpu, preempt=preempt, swap_gib=swap_gib)
    events, _, target = run_sim(params, [Request(0, 0, 300, 400), Request(1, 0, 300, 400)])
    assert target.cluster.engines[0].kv_total == 1056
    return events


def test_swap_moves_the_kv_out_and_back_instead_of_recomputing() -> None:
    swap, recompute = tiny("swap"), tiny("recompute")
    pre = [e for e in swap if e.kind == "PREEMPT"]
    # both requests hold 300 + their decoded tokens; the KV runs out when request 1 holds 527 tokens
    assert [(e.req_id, e.tokens, e.detail) for e in pre] == [(1, 527, "swap")]
    xfers = [e for e in swap if e.kind in ("KV_XFER_START", "KV_XFER_END")]
    assert [(e.kind, e.detail, e.tokens) for e in xfers] == [
        ("KV_XFER_START", "swap-out", 527),
        ("KV_XFER_END", "swap-out", 527),
        ("KV_XFER_START", "swap-in", 527),
        ("KV_XFER_END", "swap-in", 527),
    ]
    # each copy: 527 x 131,072 = 69,074,944 B / 54.4e9 B/s = 1,269,760 ns on the wire + 160,000 ns of RTTs
    copy_ns = PCIE_LATENCY_NS + 1_269_760
    assert xfers[0].t_ns == pre[0].t_ns and xfers[1].t_ns - xfers[0].t_ns == copy_ns
    assert all(e.tier == "pcie5" and e.nbytes == 69_074_944 for e in xfers)
    # it comes back when request 0 finishes and frees its 700 tokens (527 never fit beside request 0's 700)
    assert xfers[2].t_ns == by_kind(swap, 0)["FINISH"].t_ns and xfers[3].t_ns - xfers[2].t_ns == copy_ns
    # no second prefill; the recompute run's re-prefill of 527 tokens costs more than the copy back
    assert [e.kind for e in swap if e.req_id == 1].count("PREFILL_START") == 1
    assert [e.tokens for e in swap if e.kind == "FINISH"] == [400, 400]
    recomputed = by_kind(recompute, 1)
    prefill_ns = recomputed["PREFILL_END"].t_ns - recomputed["PREFILL_START"].t_ns
    assert recomputed["FINISH"].t_ns - by_kind(swap, 1)["FINISH"].t_ns == prefill_ns - copy_ns


def test_swap_without_room_in_the_swap_space_recomputes() -> None:
    # 0.05 GiB = 53,687,091 B = 409 tokens of swap space: the 527-token victim does not fit
    events = tiny("swap", swap_gib=0.05)
    assert [e.detail for e in events if e.kind == "PREEMPT"] == ["recompute"]
    assert not [e for e in events if e.kind == "KV_XFER_START"]
    assert [e.tokens for e in events if e.kind == "FINISH"] == [400, 400]


def landing(kv_landing: str, gpus_per_node: int = 1, tp: int = 1) -> list[Event]:
    params = pd(1, 1, gpus_per_node=gpus_per_node, transfer={"layerwise": False})
    params["pools"]["decode"]["kv_landing"] = kv_landing
    for pool in params["pools"].values():
        pool["tp"] = tp
    return run_sim(params, [Request(0, 0, 1024, 4)])[0]


def test_kv_landing_in_dram_adds_the_host_link_hop_before_the_first_token() -> None:
    hbm, dram = landing("hbm"), landing("dram")
    # 1,024 tokens x 131,072 B = 134,217,728 B / 54.4e9 B/s = 2,467,237 ns + 160,000 ns of RTTs into HBM
    hop_ns = PCIE_LATENCY_NS + 2_467_237
    xfers = [(e.kind, e.detail, e.t_ns) for e in dram if e.kind in ("KV_XFER_START", "KV_XFER_END")]
    network_end = by_kind(hbm, 0)["KV_XFER_END"].t_ns
    assert xfers[1:] == [
        ("KV_XFER_END", None, network_end),
        ("KV_XFER_START", "dram->hbm", network_end),
        ("KV_XFER_END", "dram->hbm", network_end + hop_ns),
    ]
    assert by_kind(dram, 0)["FIRST_TOKEN"].t_ns == by_kind(hbm, 0)["FIRST_TOKEN"].t_ns + hop_ns
    assert by_kind(dram, 0)["FINISH"].t_ns == by_kind(hbm, 0)["FINISH"].t_ns + hop_ns


def test_each_gpu_of_an_instance_copies_its_shard_over_its_own_host_link() -> None:
    # tp 2 on nodes of 2 GPUs: each GPU moves half of the 134,217,728 B, at once: 67,108,864 / 54.4e9 B/s
    hbm, dram = landing("hbm", 2, tp=2), landing("dram", 2, tp=2)
    hop = by_kind(dram, 0)["FIRST_TOKEN"].t_ns - by_kind(hbm, 0)["FIRST_TOKEN"].t_ns
    assert hop == PCIE_LATENCY_NS + 1_233_618


def test_kv_landing_within_a_node_goes_gpu_to_gpu() -> None:
    # prefill and decode on one 8-GPU node: NVLink straight into HBM, no hop
    assert [e.t_ns for e in landing("dram", 8)] == [e.t_ns for e in landing("hbm", 8)]


def test_kv_landing_dram_is_for_a_decode_pool() -> None:
    params = pd(1, 1)
    params["pools"]["prefill"]["kv_landing"] = "dram"
    with pytest.raises(ConfigError, match="kv_landing"):
        parse_cluster(params, "")
