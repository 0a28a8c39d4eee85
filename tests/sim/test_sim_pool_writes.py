"""Writes into write-through tiers cost bandwidth on the link they use: hand-computed on one shared NIC."""

from __future__ import annotations

from support.sim_helpers import pd, run_sim

from kvbench.records import Request


def params() -> dict:
    # P and D on different nodes (1 GPU a node): the P->D transfer and the pool write leave over node 0's "tcp" link
    # (30 us per message, 25 GB/s x 0.6 = 15 GB/s), one message per layer
    return pd(
        1,
        1,
        gpus_per_node=1,
        transfer={"link": "tcp", "granularity": "layer", "layerwise": False},
        tiers={"pool": {"capacity_tokens": "1M", "link": "tcp", "write_through": True}},
    )


def test_a_pool_write_queues_behind_the_transfer_on_the_same_nic():
    # 1,024 tokens = 2 blocks of 512, Llama-3.1-8B 131,072 B a token: 134,217,728 B; wire 134,217,728 / 15e9 s
    # = 8,947,848 ns; latency 32 layers x 30 us = 960,000 ns. The transfer starts at the end of the prefill t0:
    # its wire runs t0 + 960,000 .. t0 + 9,907,848; the write of the 2 new blocks follows on the wire:
    # .. t0 + 18,855,696
    events, _, t = run_sim(params(), [Request(0, 0, 1024, 4, (11, 12))])
    t0 = next(e.t_ns for e in events if e.kind == "PREFILL_END")
    nic = t.cluster.links.shared[(0, "tcp")]
    assert (nic.transfers, nic.bytes_moved) == (2, 2 * 134_217_728)
    assert nic.free_ns == t0 + 960_000 + 2 * 8_947_848
    assert next(e.t_ns for e in events if e.kind == "KV_XFER_END") == t0 + 960_000 + 8_947_848  # not delayed


def test_blocks_the_pool_holds_are_not_written_again():
    # the second request repeats both blocks (its prompt is cached in the prefill's HBM, so only 1 token is
    # computed): only its transfer uses the link
    reqs = [Request(0, 0, 1024, 4, (11, 12)), Request(1, 10**9, 1024, 4, (11, 12))]
    _, _, t = run_sim(params(), reqs)
    nic = t.cluster.links.shared[(0, "tcp")]
    assert (nic.transfers, nic.bytes_moved) == (3, 3 * 134_217_728)
    assert t.cluster.pool is not None and t.cluster.pool.inserted == 2


def load_times(layerwise: bool) -> tuple[int, int, int]:
    """(load start, load end, first token) of a request whose whole prefix another prefill instance wrote to the pool."""
    params = pd(
        2,
        1,
        router="round_robin",
        tiers={"pool": {"capacity_tokens": "1M", "link": "pcie5", "write_through": True, "layerwise": layerwise}},
    )
    hashes = (1, 2, 3, 4, 5)
    events, _, _ = run_sim(params, [Request(0, 0, 2560, 2, hashes), Request(1, 10**9, 2560, 2, hashes)])
    mine = [e for e in events if e.req_id == 1]
    start = next(e.t_ns for e in mine if e.kind == "KV_XFER_START")
    end = next(e.t_ns for e in mine if e.kind == "KV_XFER_END")
    first = next(e.t_ns for e in mine if e.kind == "FIRST_TOKEN")
    return start, end, first


def test_a_layerwise_prefix_load_overlaps_the_prefill():
    # request 1 (on prefill-1) loads 2,559 of its 2,560 tokens from the pool over pcie5: 5 blocks = 2,560 tokens x
    # 131,072 B = 335,544,320 B / 54.4e9 B/s = 6,168,094 ns + 32 layers x 5 us = 6,328,094 ns. Layer by layer the
    # prefill (1 token after 2,559, ~6.7 ms) starts once the first layer's share (6,328,094 // 32 = 197,752) has
    # landed: the load hides min(P - P/32, 6,328,094 - 197,752 = 6,130,342) = 6,130,342 ns of itself
    s0, e0, f0 = load_times(False)
    s1, e1, f1 = load_times(True)
    assert s0 == s1 and e0 - s0 == 6_328_094 and e1 - s1 == 197_752
    assert f0 - f1 == 6_130_342  # TTFT shrinks by what the overlap hides
