"""Pool block placement and hot-block replication (`tiers.pool.replicas`, `replicate_hot`): which node's link a read
uses, what a copy costs and when it serves; hand-computed on 'tcp' links (30 us a message, 15 GB/s)."""

from __future__ import annotations

import pytest
from support.sim_helpers import pd, run_sim

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.sim.cluster import parse_cluster
from kvbench.sim.kvcache import Tier
from kvbench.sim.replica import PoolReplicas
from kvbench.sim.transfer import Links

BLOCK = 512 * 131_072  # a 512-token block of Llama-3.1-8B: 67,108,864 B, 4,473,924 ns on the wire at 15 GB/s
LAT = 32 * 30_000  # one message per layer: 960,000 ns before the wire
WIRE = 4_473_924


def placed(copies: int, hot: int) -> PoolReplicas:
    pool = Tier("pool", "pool", 100)
    pool.insert([2])
    return PoolReplicas(pool, Links(), "tcp", 4, (copies, hot), (512, BLOCK), lambda tokens, paged: 32)


def test_the_home_copy_serves_reads_and_a_hot_block_gains_a_copy_that_spreads_them():
    r = placed(2, 2)
    assert r.home(2) == 0  # block 2's home store is node 0's
    # node 1 reads it at 0: over its own link and node 0's, both idle
    assert r.read(0, [2], [], 1, 16) == LAT + WIRE == 5_433_924
    # node 2 reads it at 0 too: node 0's link is busy with the first read, so its wire waits
    assert r.read(0, [2], [], 2, 16) == 5_433_924 + WIRE == 9_907_848
    # 2 reads: a copy goes from node 0 (the only holder) to node 3 (the idle link), behind node 0's queue
    assert r.replicated == 1 and r.copies == {2: [(3, 9_907_848 + WIRE)]}
    assert r.pool.capacity_blocks == 99  # the copy takes a block of the pool
    # two reads at 20 ms, once the copy has landed: the first takes the home copy, the second the idle copy on node 3
    t = 20_000_000
    assert r.read(t, [2], [], 1, 16) == t + LAT + WIRE
    assert r.read(t, [2], [], 2, 16) == t + LAT + WIRE  # not queued behind the first
    assert r.remote_reads == 4


def test_without_a_copy_concurrent_reads_queue_on_the_home_link():
    r = placed(1, 2)
    t = 20_000_000
    assert r.read(t, [2], [], 1, 16) == t + LAT + WIRE
    assert r.read(t, [2], [], 2, 16) == t + LAT + 2 * WIRE  # behind the first on node 0's link
    assert r.replicated == 0 and r.pool.capacity_blocks == 100


def test_a_read_on_the_home_node_uses_its_link_once_and_faster_tiers_take_their_blocks():
    r = placed(2, 0)
    r.pool.insert([5])
    hbm = Tier("hbm", "hbm", 10)
    hbm.insert([5])  # block 5 comes from HBM: the pool serves only block 2
    assert r.read(0, [2, 5], [hbm], 0, 16) == LAT + WIRE
    assert r.links.shared[(0, "tcp")].transfers == 1 and r.remote_reads == 0


def test_an_evicted_block_loses_its_copies_and_their_capacity():
    r = placed(2, 1)
    r.read(0, [2], [], 1, 16)
    assert r.replicated == 1 and r.pool.capacity_blocks == 99
    r.pool.fit(0)
    assert r.copies == {} and r.reads == {} and r.pool.capacity_blocks == 100


def test_in_the_simulator_a_pool_load_also_crosses_the_writers_link():
    # 2P1D, one GPU a node, pool over 'tcp': prefill-0 (node 0) writes the 5 blocks of request 0, so they live on
    # node 0; request 1 on prefill-1 (node 1) loads them 1 s later: 5 blocks = 335,544,320 B = 22,369,621 ns on
    # the wire after 960,000 ns, over node 1's link and node 0's, both idle by then
    tiers = {"pool": {"capacity_tokens": "1M", "link": "tcp", "write_through": True, "replicas": 1}}
    params = pd(2, 1, gpus_per_node=1, router="round_robin", tiers=tiers)
    hashes = (1, 2, 3, 4, 5)
    events, _, t = run_sim(params, [Request(0, 0, 2560, 2, hashes), Request(1, 10**9, 2560, 2, hashes)])
    r = t.cluster.replicas
    assert r is not None and r.n_nodes == 3 and [r.home(h) for h in hashes] == [0] * 5
    start = next(e for e in events if e.req_id == 1 and e.kind == "KV_XFER_START")
    end = next(e for e in events if e.req_id == 1 and e.kind == "KV_XFER_END")
    assert start.nbytes == 5 * BLOCK and end.t_ns - start.t_ns == 960_000 + 22_369_621
    node0, node1 = t.cluster.links.shared[(0, "tcp")], t.cluster.links.shared[(1, "tcp")]
    assert (node0.transfers, node0.bytes_moved) == (2, 10 * BLOCK)  # the write, then the read
    assert (node1.transfers, node1.bytes_moved) == (1, 5 * BLOCK)  # the read
    assert r.remote_reads == 5


def test_replicas_are_keys_of_the_pool_tier_only():
    bad = pd(1, 1, tiers={"dram": {"capacity_tokens": "1M", "link": "pcie5", "replicas": 2}})
    with pytest.raises(ConfigError, match="tiers.dram: replicas and replicate_hot are keys of tiers.pool"):
        parse_cluster(bad, "")
    with pytest.raises(ConfigError, match="replicate_hot"):
        parse_cluster(pd(1, 1, tiers={"pool": {"capacity_tokens": "1M", "link": "tcp", "replicate_hot": -1}}), "")
    good = parse_cluster(pd(1, 1, tiers={"pool": {"capacity_tokens": "1M", "link": "tcp", "replicas": 3}}), "")
    assert [(tc.replicas, tc.replicate_hot) for tc in good.tiers] == [(3, 0)]


def test_placed_copies_are_read_over_fifo_links_only():
    pool = {"capacity_tokens": "1M", "link": "tcp", "replicas": 2}
    with pytest.raises(
        ConfigError, match='tiers.pool.replicas reads placed copies over FIFO links: drop sharing = "fair"'
    ):
        parse_cluster(pd(1, 1, tiers={"pool": {**pool, "sharing": "fair"}}), "")
    with pytest.raises(ConfigError, match="FIFO links"):
        parse_cluster(pd(1, 1, tiers={"pool": pool}, transfer={"sharing": "fair"}), "")
    assert parse_cluster(pd(1, 1, tiers={"pool": pool}), "").tiers[0].sharing == "fifo"
