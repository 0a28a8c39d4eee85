"""In-flight sharing invariants (hypothesis): between events every engine's KV in use is within [0, capacity], a
block's pin count equals the requests holding it, and a run ends with no KV in use and nothing pinned."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim_helpers import colocated, pd

from kvbench.eventlog import EventLog
from kvbench.records import Event, Request
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext, TargetSpec

PBT = 512
PROFILES = {
    "colocated": colocated(2, engine={"share_inflight": True}),
    "pd": pd(1, 1, engine={"share_inflight": True}),
}


@st.composite
def workload(draw) -> list[Request]:
    """Requests of 3 prefix families (shared leading blocks, then their own), arriving close together."""
    out, t = [], 0
    for i in range(draw(st.integers(1, 20))):
        t += draw(st.integers(0, 300_000_000))
        family, shared, own = draw(st.integers(0, 2)), draw(st.integers(0, 6)), draw(st.integers(1, 3))
        n_in = (shared + own - 1) * PBT + draw(st.integers(1, PBT))
        hashes = (*(1000 * family + k for k in range(shared)), *(10**6 + 10 * i + k for k in range(own)))
        out.append(Request(i, t, n_in, draw(st.integers(0, 400)), hashes))
    return out


def check(t: SimTarget) -> None:
    for e in t.cluster.engines:
        assert 0 <= e.kv_used <= e.kv_total
        if e.hbm is not None and e.hbm.share is not None:
            held = Counter(h for hs in e.hbm.share.held.values() for h in hs)
            assert held == Counter(e.hbm.pinned)
            assert not set(e.hbm.pinned) & set(e.hbm.blocks)  # in use or cached, never both


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), workload(), st.integers(4000, 20000))
def test_pins_and_kv_balance_throughout_and_at_the_end(profile: str, reqs: list[Request], kv: int) -> None:
    d = tempfile.mkdtemp()
    t = SimTarget(TargetSpec("sim", "test", PROFILES[profile], ""), RunContext(0, Path(d), EventLog(d)))
    for e in t.cluster.engines:  # a small KV: preemption and eviction happen
        e.kv_total, e.blocks_total, e.watermark = kv, kv // e.block_tokens, kv // 100
    for k in range(1, 200):
        t.loop.at(k * 50_000_000, lambda _now, _arg: check(t))
    for r in reqs:
        t.submit(r, r.arrival_ns)
    events: list[Event] = []
    t.run(lambda ev: events.append(Event(*ev)))
    ends = Counter(ev.req_id for ev in events if ev.kind in ("FINISH", "ERROR", "REJECT"))
    assert ends == Counter(r.req_id for r in reqs)
    check(t)
    for e in t.cluster.engines:
        assert e.kv_used == 0
        if e.hbm is not None:
            assert e.hbm.pinned == {} and e.hbm.share is not None and e.hbm.share.held == {}
