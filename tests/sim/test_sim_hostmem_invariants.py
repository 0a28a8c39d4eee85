"""Invariants with the opt-in link and host-memory modes on (hypothesis): every request ends once, in time order,
with all its tokens; every swap-out comes back; all KV and swap space is returned at the end."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_helpers import colocated, pd, run_sim
from test_sim_invariants import _requests, _tiny, request_st

from kvbench.records import TERMINAL

FAIR_TIERS = {
    "dram": {"capacity_tokens": 8_000, "link": "pcie5", "sharing": "fair"},
    "pool": {"capacity_tokens": 30_000, "link": "rdma-mooncake", "write_through": True, "sharing": "fair"},
}


def _swap(params: dict, *roles: str, swap_gib: float = 0.3) -> dict:
    """preempt = "swap" on the pools of `roles` (0.3 GiB of swap space: ~2,400 tokens, so the largest victims recompute)."""
    for pool in params["pools"].values():
        if pool["role"] in roles:
            pool.update(preempt="swap", swap_gib=swap_gib)
    return params


def _landing(params: dict) -> dict:
    params["pools"]["decode"]["kv_landing"] = "dram"
    return params


PROFILES = {
    "colocated-swap": _swap(_tiny(colocated(2, tiers=FAIR_TIERS)), "colocated"),
    "pd-fair-swap-landing": _landing(
        _swap(
            _tiny(pd(2, 2, gpus_per_node=1, transfer={"sharing": "fair", "link": "rdma-mooncake"}, tiers=FAIR_TIERS)),
            "decode",
        )
    ),
    "pd-fifo-swap-landing": _landing(_swap(_tiny(pd(1, 2, gpus_per_node=1)), "decode", swap_gib=1.0)),
    "star-fair": _tiny(pd(1, 3, transfer={"sharing": "fair"}, reschedule={"interval_ms": 20.0, "link": "nvlink-h100"})),
}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), st.lists(request_st, min_size=1, max_size=25), st.integers(0, 3))
def test_requests_end_once_and_host_memory_is_returned(profile, raw, seed):
    reqs = _requests(raw)
    events, _, target = run_sim(PROFILES[profile], reqs, seed)
    assert sorted(e.req_id for e in events if e.kind in TERMINAL) == [r.req_id for r in reqs]
    for r in reqs:
        mine = [e for e in events if e.req_id == r.req_id]
        assert [e.t_ns for e in mine] == sorted(e.t_ns for e in mine), [(e.kind, e.t_ns) for e in mine]
        if mine[-1].kind == "FINISH":
            assert mine[-1].tokens == r.output_tokens
        details = [e.detail for e in mine if e.kind == "KV_XFER_START"]
        assert details.count("swap-out") == details.count("swap-in")
    hm = target.cluster.hostmem
    assert not hm.swapped
    assert all(e.kv_used == 0 and not e.incoming and not e.running for e in target.cluster.engines)
    pools = {p.role: p for p in target.cluster.cfg.pools}
    for e, room in hm.swap_room.items():  # tiny GPUs: one GPU an instance
        assert room == int(pools[e.role].swap_gib * 2**30) // target.cluster.kv_bytes
