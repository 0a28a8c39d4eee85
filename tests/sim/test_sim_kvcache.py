"""KV tiers: LRU order, demotion down the chain, prefix lookup stopping at the first miss, and the trace LRU check."""

from __future__ import annotations

from kvbench.sim.kvcache import Tier, lookup, lru_hit_ratio
from kvbench.workload.mooncake import read_mooncake


def test_lru_evicts_least_recently_used_and_demotes():
    dram = Tier("dram", "dram", 3)
    hbm = Tier("hbm", "hbm", 2, below=dram)
    hbm.insert([1, 2])
    hbm.insert([1])  # 1 is now most recent; 2 is the LRU
    hbm.insert([3])  # evicts 2 -> dram
    assert list(hbm.blocks) == [1, 3]
    assert list(dram.blocks) == [2]
    hbm.insert([4, 5])  # evicts 1 then 3 -> dram (order of eviction = LRU first)
    assert list(hbm.blocks) == [4, 5]
    assert list(dram.blocks) == [2, 1, 3]
    hbm.insert([6])  # evicts 4 -> dram, which is full (3): dram evicts its LRU, 2
    assert list(dram.blocks) == [1, 3, 4]
    assert (hbm.evicted, dram.evicted) == (4, 1)


def test_capacity_never_exceeded_and_fit_shrinks():
    t = Tier("pool", "pool", 5)
    for i in range(100):
        t.insert([i, i + 1, i + 2])
        assert len(t) <= 5
    t.fit(2)
    assert list(t.blocks) == [100, 101]  # the last insert was [99, 100, 101]: the two most recent stay


def test_lookup_follows_hashes_and_stops_at_first_miss():
    hbm, dram, pool = Tier("h", "hbm", 10), Tier("d", "dram", 10), Tier("p", "pool", 10)
    hbm.insert([10, 11])
    dram.insert([12])
    pool.insert([13, 15])
    # 10, 11 from HBM, 12 from DRAM, 13 from the pool, 14 missing everywhere: 15 is not reached
    assert lookup([10, 11, 12, 13, 14, 15], [hbm, dram, pool]) == [2, 1, 1]
    # a block held by several tiers is served by the fastest
    pool.insert([10])
    assert lookup([10], [hbm, dram, pool]) == [1, 0, 0]
    assert lookup([99, 10], [hbm, dram, pool]) == [0, 0, 0]


def test_single_global_lru_matches_the_trace_figure(conversation_trace):
    # SOURCES.md: one global LRU over 512-token blocks of conversation_trace.jsonl, lookup = leading run of
    # resident ids then insert all ids: 3M tokens -> 13.6 % of blocks hit. 3,000,000 / 512 = 5,859 blocks.
    hashes = [r.hash_ids for r in read_mooncake(conversation_trace)]
    hits, total = lru_hit_ratio(hashes, 3_000_000 // 512)
    assert round(100 * hits / total, 1) == 13.6
    # ... and 10M tokens -> 28.5 % (19,531 blocks): a bigger cache can only hit more
    hits10, _ = lru_hit_ratio(hashes, 10_000_000 // 512)
    assert round(100 * hits10 / total, 1) == 28.5
