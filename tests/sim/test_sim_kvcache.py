"""KV tiers: LRU order, demotion down the chain, prefix lookup stopping at the first miss, and the trace LRU check."""

from __future__ import annotations

import random
from collections import OrderedDict

from kvbench.sim.kvcache import Tier, lookup, lru_hit_ratio, walk
from kvbench.workload.mooncake import read_mooncake


def test_lru_evicts_least_recently_used_and_demotes():
    dram = Tier("dram", "dram", 3)
    hbm = Tier("hbm", "hbm", 2, below=dram)
    hbm.insert([1, 2])
    hbm.insert([1])  # 1 is now most recent; 2 is the LRU
    hbm.insert([3])  # evicts 2 -> dram
    assert hbm.order() == [1, 3]
    assert dram.order() == [2]
    hbm.insert([4, 5])  # evicts 1 then 3 -> dram (order of eviction = LRU first)
    assert hbm.order() == [4, 5]
    assert dram.order() == [2, 1, 3]
    hbm.insert([6])  # evicts 4 -> dram, which is full (3): dram evicts its LRU, 2
    assert dram.order() == [1, 3, 4]
    assert (hbm.evicted, dram.evicted) == (4, 1)


def test_capacity_never_exceeded_and_fit_shrinks():
    t = Tier("pool", "pool", 5)
    for i in range(100):
        t.insert([i, i + 1, i + 2])
        assert len(t) <= 5
    t.fit(2)
    assert t.order() == [100, 101]  # the last insert was [99, 100, 101]: the two most recent stay


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


def test_walk_of_hbm_and_one_tier_below():
    # the two-tier walk (written out): HBM first, pinned blocks count as HBM, the walk stops at the first miss
    hbm, dram = Tier("h", "hbm", 10), Tier("d", "dram", 10)
    hbm.insert([1, 2, 5])
    hbm.pinned[4] = 1
    dram.insert([3, 5, 6, 8])
    # 1, 2 lead in HBM; 3 from DRAM; 4 in use on HBM; 5 held by both (HBM serves it); 6 DRAM; 7 missing: 8 unseen
    assert walk([1, 2, 3, 4, 5, 6, 7, 8], [hbm, dram]) == ([4, 2], 2)
    assert walk([9, 1], [hbm, dram]) == ([0, 0], 0)
    assert walk([1, 2], [hbm, dram]) == ([2, 0], 2)


def test_single_global_lru_matches_the_trace_figure(conversation_trace):
    # SOURCES.md: one global LRU over 512-token blocks of conversation_trace.jsonl, lookup = leading run of
    # resident ids then insert all ids: 3M tokens -> 13.6 % of blocks hit. 3,000,000 / 512 = 5,859 blocks.
    hashes = [r.hash_ids for r in read_mooncake(conversation_trace)]
    hits, total = lru_hit_ratio(hashes, 3_000_000 // 512)
    assert round(100 * hits / total, 1) == 13.6
    # ... and 10M tokens -> 28.5 % (19,531 blocks): a bigger cache can only hit more
    hits10, _ = lru_hit_ratio(hashes, 10_000_000 // 512)
    assert round(100 * hits10 / total, 1) == 28.5


class _OrderedLru:
    """The per-block LRU the two-generation Tier must match: an OrderedDict, one move per block."""

    def __init__(self, capacity: int, below: _OrderedLru | None = None) -> None:
        self.capacity, self.below, self.blocks = capacity, below, OrderedDict()
        self.inserted = self.evicted = 0

    def insert(self, hashes: list[int]) -> None:
        n = len(self.blocks)
        for h in hashes:
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        self.inserted += len(self.blocks) - n
        self.fit(self.capacity)

    def touch(self, hashes: list[int]) -> None:
        for h in hashes:
            if h in self.blocks:
                self.blocks.move_to_end(h)

    def fit(self, max_blocks: int) -> None:
        out = list(self.blocks)[: max(0, len(self.blocks) - max(max_blocks, 0))]
        for h in out:
            del self.blocks[h]
        self.evicted += len(out)
        if self.below is not None and out:
            self.below.insert(out)


def test_two_generation_lru_matches_a_per_block_lru():
    # Random chains over 60 ids (so blocks repeat across and within chains), refreshed, touched, dropped and
    # evicted through an HBM tier demoting into a DRAM tier: the same order, counts and demotions at every step.
    rng = random.Random(7)
    dram, ref_dram = Tier("d", "dram", 25), _OrderedLru(25)
    hbm, ref_hbm = Tier("h", "hbm", 10, below=dram), _OrderedLru(10, below=ref_dram)
    for _ in range(3000):
        op = rng.random()
        chain = [rng.randrange(60) for _ in range(rng.randint(0, 8))]
        if op < 0.5:
            hbm.capacity_blocks = ref_hbm.capacity = rng.randint(0, 14)
            hbm.insert(chain)
            ref_hbm.insert(chain)
        elif op < 0.7:
            lead = hbm.match(chain)
            hbm.touch(chain, lead)
            ref_hbm.touch(chain)
        elif op < 0.8:
            dram.touch(chain)
            ref_dram.touch(chain)
        elif op < 0.9:
            m = rng.randint(0, 12)
            hbm.fit(m)
            ref_hbm.fit(m)
        else:
            for h in chain:  # a block taken into a request's KV (in-flight sharing)
                hbm.discard(h)
                ref_hbm.blocks.pop(h, None)
        for tier, ref in ((hbm, ref_hbm), (dram, ref_dram)):
            assert tier.order() == list(ref.blocks)
            assert set(tier.blocks) == set(ref.blocks) and len(tier) == len(ref.blocks)
            assert (tier.inserted, tier.evicted) == (ref.inserted, ref.evicted)
