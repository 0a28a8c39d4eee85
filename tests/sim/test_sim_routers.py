"""Routers on hand-built cluster states, admission control, interrupts."""

from __future__ import annotations

import pytest
from support.sim_helpers import colocated, pd, run_sim

from kvbench.records import Request
from kvbench.sim.job import Job
from kvbench.sim.router import ROUTERS, RouterState


def _target(params):
    _, _, t = run_sim(params, [])
    return t


def test_cache_aware_prefers_the_worker_holding_the_prefix_and_rebalances():
    t = _target(colocated(3, router={"name": "cache_aware"}))
    st = RouterState(t.cfg.params(), 0)
    a = Job(Request(0, 0, 2048, 1, (1, 2, 3, 4)))
    first, _ = ROUTERS["cache_aware"](t.cluster, a, st)
    # nothing routed yet: no match above 0.3 -> the worker with the smallest tree (all empty: colocated-0)
    assert first.name == "colocated-0"
    # same 4-block prefix + 1 new block: match 4/5 = 0.8 > 0.3 -> colocated-0 again, even if others are equal
    b = Job(Request(1, 0, 2560, 1, (1, 2, 3, 4, 5)))
    assert ROUTERS["cache_aware"](t.cluster, b, st)[0].name == "colocated-0"
    # a different prefix (match 0) -> the smallest tree, now colocated-1
    c = Job(Request(2, 0, 512, 1, (9,)))
    assert ROUTERS["cache_aware"](t.cluster, c, st)[0].name == "colocated-1"
    # imbalance: 70 requests waiting on colocated-0 (70 - 0 > 64 and 70 > 1.5 x 0) -> shortest queue wins
    t.cluster.engines[0].waiting.extend(Job(Request(100 + i, 0, 10, 1)) for i in range(70))
    assert ROUTERS["cache_aware"](t.cluster, b, st)[0].name in ("colocated-1", "colocated-2")


def test_kv_router_weighs_host_hits_at_three_quarters():
    t = _target(
        pd(
            2,
            1,
            router={"name": "kv_router"},
            tiers={"dram": {"capacity_tokens": "1M", "link": "pcie5"}},
            gpus_per_node=1,
        )
    )
    p0, p1 = t.cluster.first
    hashes = tuple(range(8))
    # prefill-0 holds the first 4 blocks in HBM; prefill-1's node holds all 8 in DRAM
    p0.hbm.capacity_blocks = 100
    p0.hbm.insert(hashes[:4])
    t.cluster.node_tiers[p1.node]["dram"].insert(hashes)
    job = Job(Request(0, 0, 8 * 512, 1, hashes))
    # cost = 1.0 x max(0 + 8 - overlap, 0) + 0: prefill-0 overlap 4 -> cost 4; prefill-1 overlap 0.75 x 8 = 6 -> 2
    assert ROUTERS["kv_router"](t.cluster, job, RouterState(t.cfg.params(), 0))[0] is p1
    # with 1,500 tokens already queued on prefill-1 (2.93 blocks): cost 4.93 > 4 -> prefill-0
    p1.queued_tokens = 1500
    assert ROUTERS["kv_router"](t.cluster, job, RouterState(t.cfg.params(), 0))[0] is p0


def test_cpd_sends_cold_prompts_to_pre_prefill_and_warm_ones_to_prefill():
    params = {
        "kind": "sim",
        "model": "Llama-3.1-8B",
        "router": "cpd",
        "pools": {
            "a": {"role": "pre_prefill", "instances": 1, "gpu": "H100"},
            "b": {"role": "prefill", "instances": 1, "gpu": "H100"},
            "c": {"role": "decode", "instances": 1, "gpu": "H100"},
        },
        "tiers": {"pool": {"capacity_tokens": "1M", "link": "rdma-mooncake", "write_through": True}},
    }
    # request 0 is cold -> pre-prefill, which writes its 4 blocks to the pool; request 1 repeats 3 of them
    # (3/4 = 0.75 >= 0.5: warm) -> prefill, loading the cached prefix from the pool
    reqs = [Request(0, 0, 2048, 2, (1, 2, 3, 4)), Request(1, 10**9, 2048, 2, (1, 2, 3, 7))]
    events, _, _ = run_sim(params, reqs)
    routes = {e.req_id: e.instance for e in events if e.kind == "ROUTE"}
    assert routes == {0: "pre-prefill-0", 1: "prefill-0"}
    fin = {e.req_id: e for e in events if e.kind == "FIRST_TOKEN"}
    assert fin[1].cached_tokens == 3 * 512 and fin[1].tier == "pool"


def test_conductor_rejects_when_predicted_ttft_breaks_the_slo():
    # prefill of 20k tokens on an H100 takes ~0.7 s: with a 500 ms TTFT SLO the conductor rejects it early
    params = pd(1, 1, router={"name": "conductor", "ttft_slo_ms": 500.0})
    events, _, _ = run_sim(params, [Request(0, 0, 1000, 5), Request(1, 0, 20_000, 5)])
    kinds = {e.req_id: [x.kind for x in events if x.req_id == e.req_id] for e in events}
    assert kinds[0][-1] == "FINISH"
    assert kinds[1] == ["ARRIVE", "SEND", "REJECT"]
    rej = next(e for e in events if e.kind == "REJECT")
    assert rej.detail.startswith("slo: predicted TTFT")


def test_interrupt_cancels_every_open_request_once():
    reqs = [Request(i, i * 50_000_000, 3000, 200) for i in range(20)]
    seen = []

    def emit(ev):
        seen.append(ev)
        if len(seen) == 40:
            raise KeyboardInterrupt

    _, _, t = run_sim(colocated(), [])
    for r in reqs:
        t.submit(r, r.arrival_ns)
    with pytest.raises(KeyboardInterrupt):
        t.run(emit)
    ends = [ev[1] for ev in seen if ev[2] in ("FINISH", "CANCEL", "REJECT", "ERROR")]
    assert sorted(ends) == list(range(20))
    # every CANCEL is stamped at the interruption (the time of the last event handled), never a future arrival
    t_stop = max(ev[0] for ev in seen if ev[2] not in ("CANCEL",))
    assert {ev[0] for ev in seen if ev[2] == "CANCEL"} == {t_stop}
    arrived = {ev[1] for ev in seen if ev[2] == "ARRIVE"}
    assert arrived == {r.req_id for r in reqs if r.arrival_ns <= t_stop}  # never released: only a CANCEL
    assert 0 < len(arrived) < 20
