"""The built cluster (placement, P->D links, message counts, tier chains) and the engine's record of its last step."""

from __future__ import annotations

from support.sim_helpers import colocated, pd, run_sim

from kvbench.records import Request
from kvbench.sim.job import JobState


def test_pd_on_one_node_moves_kv_over_the_intra_node_link() -> None:
    _, _, t = run_sim(pd(2, 2), [])
    c = t.cluster
    assert [(e.name, e.node) for e in c.engines] == [
        ("prefill-0", 0),
        ("prefill-1", 0),
        ("decode-0", 0),
        ("decode-1", 0),
    ]
    assert [e.name for e in c.first] == ["prefill-0", "prefill-1"]
    assert [e.name for e in c.decode] == ["decode-0", "decode-1"]
    link, detail = c.p2d(c.first[0], c.decode[1])
    assert link.link.name == "nvlink-h100" and detail == "to decode-1"
    assert c.p2d(c.first[0], c.decode[1]) is c.p2d(c.first[0], c.decode[1])  # looked up once per engine pair


def test_pd_across_nodes_shares_one_nic_per_source_node() -> None:
    _, _, t = run_sim(pd(2, 1, gpus_per_node=1), [])
    c = t.cluster
    p0, p1 = c.first
    d0 = c.decode[0]
    assert (p0.node, p1.node, d0.node) == (0, 1, 2)
    assert c.p2d(p0, d0)[0].link.name == "roce-mooncake"
    assert c.p2d(p0, d0)[0] is not c.p2d(p1, d0)[0]  # each node its own NIC
    assert c.link_between(p0, d0, "rdma-mooncake").link.name == "rdma-mooncake"
    assert c.link_between(p0, p0, "rdma-mooncake").link.name == "nvlink-h100"


def test_messages_follow_the_profile_granularity() -> None:
    # Llama-3.1-8B has 32 layers; 100 tokens in 16-token blocks are 7 blocks
    for gran, expected in (("layer", 32), ("layer-block", 32 * 7), ("request", 1)):
        _, _, t = run_sim(pd(1, 1, transfer={"granularity": gran}), [])
        assert t.cluster.messages(100, 16) == expected
        assert t.cluster.messages(0, 16) == 0


def test_tier_chains_run_from_hbm_down_to_the_pool() -> None:
    tiers = {
        "dram": {"capacity_tokens": "1M", "link": "pcie5"},
        "pool": {"capacity_tokens": "4M", "link": "roce-mooncake"},
    }
    _, _, t = run_sim(pd(1, 1, tiers=tiers), [])
    c = t.cluster
    p0 = c.first[0]
    assert [tier.name for tier in c.chains[p0]] == ["hbm:prefill-0", "dram:node-0", "pool"]
    assert [tier.name for tier in c.shared_chain()] == ["dram:node-0", "pool"]
    assert c.node_tier(p0, "dram") is c.chains[p0][1]
    assert c.node_tier(p0, "ssd") is None
    assert p0.hbm is not None and p0.hbm.below is c.chains[p0][1]
    assert c.decode[0].hbm is None  # decode engines keep no prefix cache
    assert c.chains[p0][1].wire().link.name == "pcie5"
    assert c.pool_link_on(0).link.name == "roce-mooncake" and c.pool_link_on(0) is not c.pool_link_on(1)


def test_the_running_step_record_holds_the_last_step_and_jobs_end_done() -> None:
    # 100-token prompt, 3 output tokens, alone: one prefill step, then one run of the 2 remaining decode steps
    events, steps, t = run_sim(colocated(), [Request(0, 0, 100, 3)])
    assert [(r[3], r[4], r[5], r[6]) for r in steps] == [(1, 1, 100, 0), (2, 1, 0, 1)]
    e = t.cluster.engines[0]
    r = e.current
    last = steps[-1]
    assert (r.t0_ns, r.n_steps, r.batch, r.prefill_tokens, r.chunks) == (last[1], 2, 1, 0, ())
    assert r.kv_blocks == last[7] == 7  # 100 tokens reserved when the run started: ceil(100 / 16) blocks
    assert not e.busy and e.batch == 0 and e.kv_used == 0
    assert [ev.kind for ev in events][-1] == "FINISH"
    assert [s.name for s in JobState] == ["WAITING", "PREFILL", "HANDOFF", "DECODE", "DONE"]
