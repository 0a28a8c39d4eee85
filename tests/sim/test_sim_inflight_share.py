"""In-flight prefix sharing (`share_inflight`): a running request's HBM blocks serve a concurrent request of the same
prefix, and a shared block takes HBM once. Hand-computed on one colocated engine, plus accounting invariants."""

from __future__ import annotations

import tempfile
from pathlib import Path

from support.sim_helpers import colocated, run_sim

from kvbench.eventlog import EventLog
from kvbench.records import Event, Request
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext, TargetSpec

PBT = 512  # the profile's prefix_block_tokens (default)
A = Request(0, 0, 4 * PBT + 100, 4000, (1, 2, 3, 4, 5))  # 4 full blocks + 100 tokens
B = Request(1, 10**9, 4 * PBT + 100, 8000, (1, 2, 3, 4, 9))  # the same 4 blocks, its own 100 tokens


def run_probed(params: dict, requests: list[Request], probes: list[int], kv_tokens: int = 0):
    """(events, target, probes) with each probe = (engine kv_used, running jobs' contexts, pinned, cached) at a time;
    `kv_tokens` shrinks the engine's KV."""
    d = tempfile.mkdtemp()
    t = SimTarget(TargetSpec("sim", "test", params, ""), RunContext(0, Path(d), EventLog(d)))
    e = t.cluster.engines[0]
    if kv_tokens:
        e.kv_total, e.blocks_total, e.watermark = kv_tokens, kv_tokens // e.block_tokens, kv_tokens // 100
    seen: list[tuple[int, dict[int, int], dict[int, int], list[int]]] = []

    def probe(_now: int, _arg: object) -> None:
        ctx = {j.rid: j.kv + (e.steps - j.join_step) * e.kv_per_step for j in e.running}
        seen.append((e.kv_used, ctx, dict(e.hbm.pinned), e.hbm.order()))

    for at in probes:
        t.loop.at(at, probe)
    for r in requests:
        t.submit(r, r.arrival_ns)
    events: list[Event] = []
    t.run(lambda ev: events.append(Event(*ev)))
    return events, t, seen


def first(events: list[Event], rid: int, kind: str) -> Event:
    return next(ev for ev in events if ev.req_id == rid and ev.kind == kind)


def test_a_concurrent_request_shares_the_running_requests_blocks_and_they_count_once():
    # B arrives (1 s) while A decodes. Shared: B's prompt hits A's 4 in-use blocks (2,048 tokens) and computes only
    # its own 100; the engine's KV in use = A's context + B's context - 2,048 (the shared blocks count once)
    params = colocated(1, engine={"share_inflight": True})
    events, _, seen = run_probed(params, [A, B], [2 * 10**9, 40 * 10**9])
    assert first(events, 1, "PREFILL_START").cached_tokens == 2048
    assert first(events, 1, "PREFILL_END").tokens == 100
    assert first(events, 1, "FINISH").cached_tokens == 2048
    kv, ctx, pinned, cached = seen[0]
    assert set(ctx) == {0, 1} and first(events, 0, "FINISH").t_ns > 2 * 10**9  # A still decodes at the probe
    assert kv == ctx[0] + ctx[1] - 2048
    assert pinned == {1: 2, 2: 2, 3: 2, 4: 2}  # two users each; the partial blocks 5 and 9 are never shared
    assert cached == []
    # once A has finished, B's reservation holds the 4 blocks; A's own block goes to the LRU in free KV
    assert first(events, 0, "FINISH").t_ns < 40 * 10**9 < first(events, 1, "FINISH").t_ns
    kv, ctx, pinned, cached = seen[1]
    assert set(ctx) == {1} and kv == ctx[1]
    assert pinned == {1: 1, 2: 1, 3: 1, 4: 1} and cached == [5]


def test_without_sharing_the_running_requests_blocks_are_not_hit():
    # today's model (the default): A's blocks reach the cache only when A releases them, after B arrived
    events, _, seen = run_probed(colocated(1), [A, B], [2 * 10**9])
    assert first(events, 1, "PREFILL_START").cached_tokens == 0
    assert first(events, 1, "PREFILL_END").tokens == 4 * PBT + 100
    kv, ctx, pinned, _ = seen[0]
    assert kv == ctx[0] + ctx[1] and pinned == {}


def test_a_request_whose_prefix_is_in_use_needs_room_only_for_its_own_tokens():
    # 4,000 KV tokens (40 kept free): A holds 2,148 + its output. B needs its whole 2,148 tokens unshared (no room
    # until A has finished), but only its own 100 with A's 4 blocks shared: admitted at once
    a, b = Request(0, 0, 4 * PBT + 100, 500, A.hash_ids), Request(1, 10**9, 4 * PBT + 100, 500, B.hash_ids)
    shared, _, _ = run_probed(colocated(1, engine={"share_inflight": True}), [a, b], [], kv_tokens=4000)
    alone, _, _ = run_probed(colocated(1), [a, b], [], kv_tokens=4000)
    assert first(shared, 1, "PREFILL_START").t_ns < first(shared, 0, "FINISH").t_ns
    assert first(alone, 1, "PREFILL_START").t_ns >= first(alone, 0, "FINISH").t_ns
    # unshared, the prefix lookup on arrival found A's blocks in use: B computes its whole prompt after waiting
    assert (first(alone, 1, "PREFILL_START").cached_tokens, first(shared, 1, "PREFILL_START").cached_tokens) == (
        0,
        2048,
    )


def test_sharing_ends_with_no_kv_in_use_and_nothing_pinned_under_preemption():
    # 40 requests of 3 sessions' prefixes at once on an engine whose KV holds a few of them: preemptions happen,
    # and every pin and credit is undone by the end
    params = colocated(1, engine={"share_inflight": True}, pools={"main": {"role": "colocated", "gpu": "H100"}})
    params["pools"]["main"]["mem_fraction"] = 0.3
    reqs = [
        Request(i, i * 10**6, 3 * PBT + 7, 3000, (100 + i % 3, 200 + i % 3, 300 + i % 3, 1000 + i)) for i in range(40)
    ]
    events, t, _ = run_probed(params, reqs, [])
    e = t.cluster.engines[0]
    assert sum(ev.kind == "FINISH" for ev in events) == 40
    assert any(ev.kind == "PREEMPT" for ev in events)
    assert e.kv_used == 0 and e.hbm.pinned == {}
    assert e.hbm.share.held == {} and e.hbm.share.upto == {}
    assert e.hbm.share.shared_hits > 0


def test_blocks_are_shareable_as_soon_as_their_prefill_chunk_is_computed():
    # A's 16,484-token prompt takes 3 chunks of the 8,192-token budget; B (the same first 16 blocks, then its own)
    # arrives 1 ns after A's first chunk: it hits the 16 blocks (8,192 tokens) that chunk computed
    hashes = tuple(range(1, 34))
    a = Request(0, 0, 32 * PBT + 100, 10, hashes)
    _, steps, _ = run_sim(colocated(1, engine={"share_inflight": True}), [a])
    t1 = steps[0][2]  # end of the first step (name, t0, t1, ...)
    assert steps[0][5] == 8192
    b = Request(1, t1 + 1, 16 * PBT + 100, 10, (*hashes[:16], 99))
    events, _, _ = run_sim(colocated(1, engine={"share_inflight": True}), [a, b])
    assert first(events, 1, "PREFILL_START").cached_tokens == 8192
    assert first(events, 1, "PREFILL_START").t_ns < first(events, 0, "PREFILL_END").t_ns  # A still prefilling
    unshared, _, _ = run_sim(colocated(1), [a, b])
    assert first(unshared, 1, "PREFILL_START").cached_tokens == 0
