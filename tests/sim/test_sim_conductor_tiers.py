"""Mooncake's Conductor prices a prompt's cached prefix on every tier the instance loads from, each over its link."""

from __future__ import annotations

from support.sim_helpers import pd, run_sim

from kvbench.records import Request
from kvbench.sim.job import Job
from kvbench.sim.router import ROUTERS, RouterState, kv_ready_ns
from kvbench.sim.spec import link
from kvbench.sim.transfer import transfer_ns

HASHES = tuple(range(8))  # 8 blocks of 512 tokens: a 4,096-token prompt
KV_BYTES = 32 * 8 * 128 * 2 * 2  # Llama-3.1-8B: layers x KV heads x head dim x (K, V) x 2 bytes = 128 KiB per token


def _cluster(tiers):
    _, _, t = run_sim(pd(2, 1, router={"name": "conductor"}, tiers=tiers, gpus_per_node=1), [])
    p0, p1 = t.cluster.first
    for e in (p0, p1):
        e.hbm.capacity_blocks = 100
    return t, p0, p1


def test_conductor_sees_the_node_dram_cache_priced_over_its_link():
    t, p0, p1 = _cluster({"dram": {"capacity_tokens": "1M", "link": "pcie5"}})
    c = t.cluster
    c.node_tier(p0, "dram").insert(HASHES)  # prefill-0's node holds the whole prompt in host DRAM
    p1.hbm.insert(HASHES[:2])  # prefill-1 holds the first 2 blocks in HBM
    job = Job(Request(0, 0, 8 * 512, 1, HASHES))
    assert c.kv_bytes == KV_BYTES
    # prefill-0: 8 blocks over PCIe5, 8 messages x 5 us + 536,870,912 B / (64 GB/s x 0.85) = 40 us + 9.869 ms,
    # then 1 token computed against 4,095 cached; prefill-1: 3,072 tokens computed against 1,024 cached
    cost = p0.pricer.cost
    assert kv_ready_ns(c, p0, job, 4) == 40_000 + 9_868_950 + cost.prefill_ns(1, 4095)
    assert kv_ready_ns(c, p1, job, 4) == cost.prefill_ns(3072, 1024)
    assert kv_ready_ns(c, p0, job, 4) < kv_ready_ns(c, p1, job, 4)
    # the HBM-only view saw 0 blocks on prefill-0 and 2 on prefill-1 and sent the request to prefill-1
    choice = ROUTERS["conductor"](c, job, RouterState(t.cfg.params(), 0))
    assert choice is not None and choice[0] is p0


def test_pool_counts_only_beyond_the_balancing_threshold():
    t, p0, _ = _cluster({"pool": {"capacity_tokens": "1M", "link": "rdma-mooncake"}})
    c = t.cluster
    c.pool.insert(HASHES)
    cost = p0.pricer.cost
    job = Job(Request(0, 0, 8 * 512, 1, HASHES))
    # HBM holds 4 blocks: the pool adds 4, not more than the threshold of 4 -> recompute the last 2,048 tokens
    p0.hbm.insert(HASHES[:4])
    assert kv_ready_ns(c, p0, job, 4) == cost.prefill_ns(2048, 2048)
    # with a threshold of 3 the same 4 pool blocks count: loaded over the Mooncake RDMA link (4 messages)
    load = transfer_ns(link("rdma-mooncake"), 4 * 512 * KV_BYTES, 4) + cost.prefill_ns(1, 4095)
    assert load < cost.prefill_ns(2048, 2048)
    assert kv_ready_ns(c, p0, job, 3) == load


def test_no_prefix_cache_means_full_prefill():
    params = pd(1, 1, router={"name": "conductor"}, prefix_caching=False)
    params["tiers"] = {"pool": {"capacity_tokens": "1M", "link": "rdma-mooncake"}}
    _, _, t = run_sim(params, [])
    (p0,) = t.cluster.first
    t.cluster.pool.insert(HASHES)  # the pool holds the prompt, but without prefix caching nothing is loaded
    job = Job(Request(0, 0, 8 * 512, 1, HASHES))
    assert kv_ready_ns(t.cluster, p0, job, 0) == p0.pricer.cost.prefill_ns(4096)
