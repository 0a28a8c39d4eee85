"""Simulator invariants (hypothesis): every request ends exactly once, a request's events are in time order,
no KV tier or engine ever holds more than its capacity, whatever the deployment and workload."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_helpers import colocated, pd

from kvbench.eventlog import EventLog
from kvbench.records import TERMINAL, Event, Request
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext, TargetSpec

MS = 1_000_000
TINY_GPU = {"flops_per_s": 989e12, "hbm_bytes": 18_500_000_000, "hbm_bytes_per_s": 3.35e12}  # ~4.6k KV tokens


def _tiny(params: dict) -> dict:
    for pool in params["pools"].values():
        pool["gpu"] = TINY_GPU
        pool["max_running"] = 16
        pool["token_budget"] = 2048
    return params


PROFILES = {
    "colocated": _tiny(colocated(2, tiers={"dram": {"capacity_tokens": 20_000, "link": "pcie5"}})),
    "pd": _tiny(
        pd(
            2,
            2,
            router={"name": "cache_aware"},
            tiers={
                "dram": {"capacity_tokens": 8_000, "link": "pcie5"},
                "pool": {"capacity_tokens": 30_000, "link": "rdma-mooncake", "write_through": True},
            },
        )
    ),
    "conductor": _tiny(
        pd(
            2,
            1,
            router={"name": "conductor", "ttft_slo_ms": 400.0, "tbt_slo_ms": 50.0, "predict_decode_load": True},
            tiers={"pool": {"capacity_tokens": 30_000, "link": "rdma-mooncake"}},
        )
    ),
    "kv_router": _tiny(
        pd(
            2,
            2,
            router={"name": "kv_router", "temperature": 0.5},
            tiers={"dram": {"capacity_tokens": 8_000, "link": "pcie5"}},
        )
    ),
    "star": _tiny(pd(1, 3, reschedule={"interval_ms": 20.0, "predictor_error": 0.5, "link": "nvlink-h100"})),
    "longctx": _tiny(
        pd(
            3,
            2,
            long_context={"threshold_tokens": 1500, "instances": 2, "mode": "context_parallel"},
            tiers={"dram": {"capacity_tokens": 8_000, "link": "pcie5"}},
        )
    ),
    "spec": _tiny(colocated(1, spec_decode={"k": 3, "acceptance": [0.8, 0.6, 0.4]})),
    "cpd": _tiny(
        {
            "kind": "sim",
            "model": "Llama-3.1-8B",
            "router": "cpd",
            "pools": {
                "a": {"role": "pre_prefill", "instances": 1, "gpu": "H100"},
                "b": {"role": "prefill", "instances": 1, "gpu": "H100"},
                "c": {"role": "decode", "instances": 2, "gpu": "H100"},
            },
            "tiers": {"pool": {"capacity_tokens": 30_000, "link": "rdma-mooncake", "write_through": True}},
        }
    ),
}

request_st = st.tuples(st.integers(0, 400), st.integers(1, 3000), st.integers(0, 600), st.integers(0, 3))


def _requests(raw) -> list[Request]:
    reqs, t = [], 0
    for i, (gap_ms, n_in, n_out, family) in enumerate(raw):
        t += gap_ms * MS
        blocks = -(-n_in // 512)
        hashes = tuple(family * 1000 + b for b in range(blocks))  # same family = shared prefix
        reqs.append(Request(i, t, n_in, n_out, hashes))
    return reqs


def run_checked(params: dict, reqs: list[Request], seed: int = 0) -> list[Event]:
    d = __import__("tempfile").mkdtemp()
    target = SimTarget(TargetSpec("sim", "t", params, ""), RunContext(seed, __import__("pathlib").Path(d), EventLog(d)))
    for r in reqs:
        target.submit(r, r.arrival_ns)
    tiers = [t for ts in target.cluster.node_tiers.values() for t in ts.values()] + (
        [target.cluster.pool] if target.cluster.pool else []
    )
    events: list[Event] = []

    def emit(ev):
        events.append(Event(*ev))
        for tier in tiers:
            assert len(tier) <= tier.capacity_blocks, tier.name
        for e in target.cluster.engines:
            cached = len(e.hbm) * e.prefix_block_tokens if e.hbm is not None else 0
            assert 0 <= e.kv_used and e.kv_used + cached <= e.kv_total, (e.name, e.kv_used, cached, e.kv_total)

    target.run(emit)
    return events


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), st.lists(request_st, min_size=1, max_size=25), st.integers(0, 3))
def test_every_request_ends_once_in_time_order_within_capacity(profile, raw, seed):
    reqs = _requests(raw)
    events = run_checked(PROFILES[profile], reqs, seed)
    ends = [e.req_id for e in events if e.kind in TERMINAL]
    assert sorted(ends) == [r.req_id for r in reqs]
    for r in reqs:
        mine = [e for e in events if e.req_id == r.req_id]
        assert mine[0].kind == "ARRIVE" and mine[-1].kind in TERMINAL
        assert [e.t_ns for e in mine] == sorted(e.t_ns for e in mine), [(e.kind, e.t_ns) for e in mine]
        fin = mine[-1]
        if fin.kind == "FINISH":
            assert fin.tokens == r.output_tokens
            assert 0 <= fin.cached_tokens < r.input_tokens


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), st.lists(request_st, min_size=1, max_size=15), st.integers(0, 3))
def test_same_seed_same_events(profile, raw, seed):
    reqs = _requests(raw)
    assert run_checked(PROFILES[profile], reqs, seed) == run_checked(PROFILES[profile], reqs, seed)
