"""Router tie-breaking: equal candidates take turns (round-robin among equals), a strictly better one always wins."""

from __future__ import annotations

import pytest
from support.sim_helpers import colocated, pd, run_sim

from kvbench.records import Request
from kvbench.sim.job import Job
from kvbench.sim.router import ROUTERS, RouterState, pick

SECOND = 10**9


def test_pick_takes_the_smallest_and_rotates_among_equals():
    st = RouterState({}, 0)
    keys = [1, 0, 0, 2]
    # the scan starts at 0: the first smallest is index 1; next scan starts at 2 -> index 2; then at 3 -> wraps to 1
    assert [pick(keys, st, "a") for _ in range(3)] == [1, 2, 1]
    # a strictly smaller key wins wherever the scan starts; lanes keep their own turn
    assert pick([5, 5, 5, 4], st, "a") == 3
    assert pick([0, 0], st, "b") == 0


def _idle_choices(params, name, n):
    """Routes of n jobs on an idle cluster (nothing is enqueued, so every engine stays equal)."""
    _, _, t = run_sim(params, [])
    st = RouterState(t.cfg.params(), 0)
    out = []
    for i in range(n):
        choice = ROUTERS[name](t.cluster, Job(Request(i, 0, 1000, 1, (i,))), st)
        assert choice is not None
        first, dec = choice
        out.append((first.name, dec.name if dec is not None else None))
    return out


@pytest.mark.parametrize("name", ["least_loaded", "conductor", "kv_router"])
def test_equal_instances_share_requests_evenly(name):
    # 2 prefill + 2 decode, all idle: 4 requests go 0, 1, 0, 1 on both sides (the old index order sent all to 0)
    got = _idle_choices(pd(2, 2, router={"name": name}), name, 4)
    assert got == [("prefill-0", "decode-0"), ("prefill-1", "decode-1")] * 2


def test_cache_aware_spreads_cold_prompts_over_equal_empty_trees():
    # distinct one-block prompts, no match: the smallest tree; 3 empty trees -> 0, 1, 2, then all hold one block
    got = [f for f, _ in _idle_choices(colocated(3, router={"name": "cache_aware"}), "cache_aware", 6)]
    assert got == ["colocated-0", "colocated-1", "colocated-2"] * 2


def test_light_load_spreads_over_all_instances_end_to_end():
    # one short request every 10 s on 4 colocated engines: each finishes long before the next arrives, so every
    # routing decision sees 4 idle engines; request i lands on engine i mod 4 and each engine runs 3 of 12
    reqs = [Request(i, i * 10 * SECOND, 500, 5) for i in range(12)]
    events, _, _ = run_sim(colocated(4, router={"name": "least_loaded"}), reqs)
    routes = {e.req_id: e.instance for e in events if e.kind == "ROUTE"}
    assert routes == {i: f"colocated-{i % 4}" for i in range(12)}


def test_a_loaded_instance_is_avoided_whatever_the_turn():
    _, _, t = run_sim(pd(3, 1, router={"name": "least_loaded"}), [])
    st = RouterState(t.cfg.params(), 0)
    p0, p1, p2 = t.cluster.first
    p1.queued_tokens = 100  # same request count, more queued prefill tokens: loses the tie-break on tokens
    route = ROUTERS["least_loaded"]
    picks = [route(t.cluster, Job(Request(i, 0, 100, 1)), st) for i in range(4)]
    assert [c[0] if c else None for c in picks] == [p0, p2, p0, p2]
