"""Fair-share links (processor sharing): hand-computed finish times as transfers start and end beside each other."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_helpers import pd, run_sim

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.sim import spec
from kvbench.sim.cluster import parse_cluster
from kvbench.sim.loop import Loop
from kvbench.sim.transfer import FairLink, SharedLink, send_all

# 1 ns a byte on the wire (1 GB/s), 1,000 ns per message round, one message in flight
LINK = spec.link_from({"alpha_ns": 1000, "bytes_per_s": 1e9}, "toy")


def run(sends: list[tuple[int, int, int]], link_cls: type[SharedLink] = FairLink) -> tuple[dict[str, int], SharedLink]:
    """Send (t, bytes, messages) transfers named a, b, c... on one link; returns when each one's callback ran."""
    loop = Loop()
    link = link_cls(LINK, loop)
    ends: dict[str, int] = {}
    for i, (t, nbytes, msgs) in enumerate(sends):
        name = "abcdefghijkl"[i]
        loop.at(t, lambda now, a: link.send(now, a[0], a[1], lambda t_end, n: ends.__setitem__(n, t_end), a[2]),
                (nbytes, msgs, name))  # fmt: skip
    loop.run()
    return ends, link


def test_two_equal_transfers_starting_together_both_take_twice_the_wire_time() -> None:
    # each: 1,000 ns latency, then 5,000 ns of wire alone; together each gets half the wire: 1,000 + 10,000
    ends, link = run([(0, 5000, 1), (0, 5000, 1)])
    assert ends == {"a": 11_000, "b": 11_000}
    # FIFO ends the busy period at the same time, but the first one earlier
    assert run([(0, 5000, 1), (0, 5000, 1)], SharedLink)[0] == {"a": 6_000, "b": 11_000}
    assert (link.busy_ns, link.bytes_moved, link.transfers) == (10_000, 10_000, 2)


def test_a_short_transfer_joining_a_long_one() -> None:
    # a: 10,000 B from t=0, on the wire from 1,000. b: 2,000 B sent at 2,000, on the wire from 3,000, when a has
    # 8,000 left. Both at half speed: b's 2,000 take 4,000 -> b ends at 7,000; a moved 2,000 more (6,000 left),
    # alone again from 7,000 -> ends at 13,000 = 1,000 + 12,000 (work-conserving)
    ends, link = run([(0, 10_000, 1), (2000, 2000, 1)])
    assert ends == {"a": 13_000, "b": 7_000}
    assert link.busy_ns == 12_000


def test_the_latency_part_is_per_message_and_not_shared() -> None:
    # b has 3 messages: 3,000 ns of RTTs before its bytes join the wire; a alone until then.
    # a: wire from 1,000, 6,000 B; by 3,000 it has 4,000 left; shared from 3,000: b's 1,000 B take 2,000 -> 5,000;
    # a has 3,000 left at 5,000 -> ends 8,000
    ends, _ = run([(0, 6000, 1), (0, 1000, 3)])
    assert ends == {"a": 8_000, "b": 5_000}
    # a transfer alone costs what transfer_ns says: 3 rounds + 1,000 B
    assert run([(0, 1000, 3)])[0] == {"a": 4_000}


def test_three_transfers_end_one_after_another() -> None:
    # sizes 1,000 / 2,000 / 3,000 on the wire together from 1,000: a done after 3 x 1,000 = 4,000; then b, c at half
    # speed: b's remaining 1,000 takes 2,000 -> 6,000; c's remaining 1,000 alone -> 7,000
    ends, _ = run([(0, 1000, 1), (0, 2000, 1), (0, 3000, 1)])
    assert ends == {"a": 4_000, "b": 6_000, "c": 7_000}


def test_projected_end_assumes_no_later_arrivals() -> None:
    loop = Loop()
    link = FairLink(LINK, loop)
    link.send(-1000, 10_000, 1, None)  # ready at 0: on the wire from now (t = 0) with all 10,000 B to go
    # b at 0: ready at 1,000 when a has 9,000 left; b needs 2,000: ends 1,000 + 2,000 (a's share) + 2,000
    assert link.projected_end(0, 2000, 1) == 5_000
    # c larger than a's rest: a's 9,000 and c's own 20,000 -> 1,000 + 9,000 + 20,000
    assert link.projected_end(0, 20_000, 1) == 30_000
    assert link.transfers == 1  # projections start nothing


def test_send_all_joins_links_and_a_callback_may_come_early() -> None:
    loop = Loop()
    fast, slow = FairLink(LINK, loop), FairLink(spec.link_from({"alpha_ns": 0, "bytes_per_s": 0.5e9}, "half"), loop)
    ends: list[int] = []
    # 2,000 B: fast lands at 3,000, slow (2 ns a byte) at 4,000; 500 ns hidden of the 4,000-ns load -> 3,500
    send_all(loop, 0, [(fast, 2000, 1), (slow, 2000, 1)], lambda t, _: ends.append(t), None, lambda d: d // 8)
    loop.run()
    assert ends == [3_500]


def past_stream(beside: int) -> int:
    """When a 5,000-B stream begun at -4,000 (ready at -3,000) lands, beside `beside` B on the wire from 0."""
    loop = Loop()
    link = FairLink(LINK, loop)
    ends: list[int] = []
    if beside:
        link.send(-1000, beside, 1, None)
    link.send(-4000, 5000, 1, lambda t, _: ends.append(t))
    loop.run()
    return ends[0]


def test_a_stream_begun_in_the_past_has_sent_its_head_already() -> None:
    # a layer-wise P->D stream pretends it began during the prefill: alone, by 0 it has sent 3,000 of its 5,000 B;
    # the rest alone -> 2,000
    assert past_stream(0) == 2_000
    # beside a 100,000-B transfer on the wire now, its 3,000 ns moved 1,500 B (half the wire): 3,500 B left at half
    # speed -> 7,000
    assert past_stream(100_000) == 7_000


def params(sharing: str) -> dict:
    # P and D on different nodes (1 GPU a node): the P->D transfer and the pool write leave over node 0's "tcp" link
    # (30 us per message, 25 GB/s x 0.6 = 15 GB/s), one message per layer
    return pd(
        1,
        1,
        gpus_per_node=1,
        transfer={"link": "tcp", "granularity": "layer", "layerwise": False, "sharing": sharing},
        tiers={"pool": {"capacity_tokens": "1M", "link": "tcp", "write_through": True}},
    )


def test_a_pool_write_shares_the_nic_with_the_transfer_under_fair_share() -> None:
    # 1,024 tokens of Llama-3.1-8B: 134,217,728 B, 8,947,848 ns of wire alone; 32 layers x 30 us = 960,000 ns of
    # latency each. Both leave at the end of the prefill t0 and enter the wire at t0 + 960,000: sharing it, both end
    # at t0 + 960,000 + 2 x 8,947,848 (FIFO: the transfer first, at t0 + 960,000 + 8,947,848)
    for sharing, wire in (("fair", 2 * 8_947_848), ("fifo", 8_947_848)):
        events, _, t = run_sim(params(sharing), [Request(0, 0, 1024, 4, (11, 12))])
        t0 = next(e.t_ns for e in events if e.kind == "PREFILL_END")
        assert next(e.t_ns for e in events if e.kind == "KV_XFER_END") == t0 + 960_000 + wire
        nic = t.cluster.links.shared[(0, "tcp")]
        assert isinstance(nic, FairLink) == (sharing == "fair")
        assert (nic.transfers, nic.bytes_moved, nic.busy_ns) == (2, 2 * 134_217_728, 2 * 8_947_848)


def test_sharing_is_checked_and_a_tier_may_share_its_link_fairly() -> None:
    with pytest.raises(ConfigError, match="transfer.sharing"):
        parse_cluster(pd(transfer={"sharing": "round"}), "")
    p = pd(tiers={"dram": {"capacity_tokens": "1M", "link": "pcie5", "sharing": "fair"}})
    _, _, t = run_sim(p, [Request(0, 0, 600, 2, (1, 2))])
    assert isinstance(t.cluster.node_tiers[0]["dram"].link, FairLink)
    assert type(t.cluster.p2d(t.cluster.first[0], t.cluster.decode[0])[0]) is SharedLink


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 9_000), st.integers(1, 3)), min_size=1, max_size=12))
def test_every_transfer_lands_once_and_the_wire_never_idles_with_work(sends) -> None:
    fair, link = run(sends)
    assert sorted(fair) == list("abcdefghijkl"[: len(sends)])  # every callback ran, once
    for name, (t, nbytes, msgs) in zip("abcdefghijkl", sends):
        assert fair[name] >= t + msgs * 1000 + nbytes  # never faster than alone
    # work-conserving: the last byte lands when a wire serving the transfers in order of their ready times would be
    # done (less than 1 ns of service may be dropped per start)
    done = 0
    for ready, nbytes in sorted((t + msgs * 1000, nbytes) for t, nbytes, msgs in sends):
        done = max(done, ready) + nbytes
    assert 0 <= max(fair.values()) - done <= len(sends) ** 2
    assert link.busy_ns >= sum(n for _, n, _ in sends)
