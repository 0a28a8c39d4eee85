"""Simulator ITL and TBT in closed form (kvbench/stepgaps.py) against a brute-force enumeration of every step."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import given, settings
from support.metrics_logs import ev, req, step, write_run
from support.step_logs import brute_force, sim_logs

from kvbench.analysis import stepgaps
from kvbench.analysis.figures import figures
from kvbench.analysis.metrics import itl_gaps, open_runs, per_request


def _tbt_ms(gaps: Counter) -> float | None:
    """Mean of the longest ceil(G / 10) of G gaps, written out one gap at a time."""
    flat = sorted(gaps.elements(), reverse=True)
    return sum(flat[: math.ceil(len(flat) / 10)]) / math.ceil(len(flat) / 10) if flat else None


@settings(max_examples=25, deadline=None)
@given(sim_logs())
def test_itl_and_tbt_equal_brute_force(tmp_path_factory, log):
    rows, reqs = log
    events = []
    for rid, inst, s, e in reqs:  # odd requests fail after their last token: their gaps are not in ITL
        end = ev(e, rid, "FINISH", inst, 50) if rid % 2 == 0 else ev(e, rid, "ERROR", inst, detail="x: y")
        events += [
            ev(0, rid, "ARRIVE", tokens=10),
            ev(0, rid, "SEND"),
            ev(s, rid, "FIRST_TOKEN", "p0", 1),
            ev(s, rid, "DECODE_START", inst),
            ev(e, rid, "LAST_TOKEN", inst, 50),
            end,
        ]
    steps = [step(inst, t0, t1, n, 1, 1) for inst, rs in rows.items() for t0, t1, n in rs]
    run = write_run(tmp_path_factory.mktemp("g") / "r", events, [req(r[0], 0, 10, 50) for r in reqs], steps)
    con = open_runs([run])
    df = per_request(con).set_index("req_id")
    pooled: Counter = Counter()
    for rid, inst, s, e in reqs:
        gaps = brute_force(rows, inst, s, e)
        want = _tbt_ms(gaps)
        got = df.loc[rid, "tbt_ns"]
        assert math.isnan(got) if want is None else math.isclose(got / 1e6, want, rel_tol=1e-12), (rid, got, want)
        if rid % 2 == 0:
            pooled += gaps
    itl = itl_gaps(con)
    assert dict(zip((itl["gap_ns"] / 1e6).round().astype(int), itl["n"])) == dict(pooled)
    assert figures(con)["itl_ms.count"] == sum(pooled.values())


def test_long_requests_are_split_into_blocks(tmp_path, monkeypatch):
    # 3 requests over one instance of 6 rows alternating 10 and 20 ms steps (no merging): row k = [60k, 60k + 60)
    # with 6 or 3 steps. Request 0 spans [0, 360) (all 27 steps: 18 of 10 ms, 9 of 20), 1 spans [65, 180)
    # (rows 1 and 2 from 65: steps of row 1 ending by 120 after 65 -> [80,100) [100,120) = 2 of 20 ms; row 2 all
    # 6 of 10 ms), 2 spans [300, 301) (no whole step).
    rows = [("d0", 60 * k, 60 * k + 60, 6 if k % 2 == 0 else 3) for k in range(6)]
    events = []
    for rid, (s, e) in enumerate([(0, 360), (65, 180), (300, 301)]):
        events += [
            ev(0, rid, "ARRIVE", tokens=10),
            ev(s, rid, "FIRST_TOKEN", "d0", 1),
            ev(e, rid, "LAST_TOKEN", "d0", 9),
            ev(e, rid, "FINISH", "d0", 9),
        ]
    run = write_run(tmp_path / "r", events, [], [step(i, a, b, n, 1, 1) for i, a, b, n in rows])
    monkeypatch.setattr(stepgaps, "BLOCK_ROWS", 2)  # every request in a block of its own
    con = open_runs([run])
    tbt = per_request(con).set_index("req_id")["tbt_ns"] / 1e6
    # request 0: G = 27, k = 3 -> the three longest are 20 ms; request 1: G = 8, k = 1 -> 20 ms
    assert tbt[0] == 20 and tbt[1] == 20 and np.isnan(tbt[2])
    itl = itl_gaps(con)
    assert dict(zip((itl["gap_ns"] / 1e6).round().astype(int), itl["n"])) == {10: 18 + 6, 20: 9 + 2}


def test_partial_counts_of_a_segment_too_long_for_int64_products():
    # one segment of 10**7 steps of 10**6 ns (length 10**13 ns: length * steps = 10**20 > 2**63); a request
    # from 2.5 steps in to 7 steps before the end gets steps 4 .. 10**7 - 7: 10**7 - 7 - 3 = 9,999,990
    seg = {"t_ns": np.array([0]), "end_ns": np.array([10**13]), "n_steps": np.array([10**7])}
    got = stepgaps.partial(seg, np.array([0]), np.array([2_500_000]), np.array([10**13 - 7 * 10**6]))
    assert got.tolist() == [10**7 - 10]


def test_two_sim_runs_with_the_same_instance_names(tmp_path):
    # request 0 decodes on d0 from 0 to 100 ms in both runs; run a's d0 runs 10 steps of 10 ms, run b's 5 of 20 ms
    def run(name, n_steps):
        events = [
            ev(0, 0, "ARRIVE", tokens=10),
            ev(0, 0, "FIRST_TOKEN", "d0", 1),
            ev(100, 0, "LAST_TOKEN", "d0", 9),
            ev(100, 0, "FINISH", "d0", 9),
        ]
        return write_run(tmp_path / name, events, [], [step("d0", 0, 100, n_steps, 1, 1)])

    con = open_runs([run("a", 10), run("b", 5)])
    itl = itl_gaps(con)
    got = {(r, round(g / 1e6)): n for r, g, n in zip(itl["run"], itl["gap_ns"], itl["n"])}
    assert got == {("a", 10): 10, ("b", 20): 5}
    tbt = per_request(con).set_index("run")["tbt_ns"] / 1e6
    assert (tbt["a"], tbt["b"]) == (10, 20)  # k = 1 of 10 gaps / 1 of 5 gaps


def test_rank_longest_first_is_a_dense_rank_from_the_largest():
    rank, by_rank = stepgaps._rank_longest_first(np.array([3.0, 1.0, 3.0, 2.5]))
    assert rank.tolist() == [0, 2, 0, 1]
    assert by_rank.tolist() == [3.0, 2.5, 1.0]


def test_longest_first_orders_rows_as_a_stable_sort_by_span_then_rank():
    # two spans of 4 and 3 rows; span 0 has two rows of rank 1 (equal gaps): they keep their places' order
    owner = np.array([0, 0, 0, 0, 1, 1, 1])
    r = np.array([2, 1, 0, 1, 0, 3, 0])
    place = np.array([0, 1, 2, 3, 0, 1, 2])
    first = np.array([0, 4])
    want = np.argsort(owner * 5 + r, kind="stable")
    assert want.tolist() == [2, 1, 3, 0, 4, 6, 5]
    order, ranks = stepgaps._longest_first(owner, r, place, 4, first)  # one integer key per row
    assert order.tolist() == want.tolist() and ranks.tolist() == r[want].tolist()
    order, ranks = stepgaps._longest_first(owner, r, place, 1 << 61, first)  # too wide for it: a stable argsort
    assert order.tolist() == want.tolist() and ranks.tolist() == r[want].tolist()


def test_pooled_itl_sums_the_weights_of_equal_gaps_per_run():
    # instances 0 and 1 are run 0's, 2 is run 1's; gaps 5 ns (weights 1, 3 in run 0; 4 in run 1), 7 ns (2), and a
    # segment nobody decoded through (weight 0) left out
    seg = {"inst": np.array([0, 0, 1, 2, 2]), "gap_ns": np.array([5.0, 7.0, 5.0, 5.0, 9.0])}
    rank = stepgaps._rank_longest_first(seg["gap_ns"])
    got = stepgaps.pooled_itl(seg, np.array([1, 2, 3, 4, 0]), rank, np.array([0, 0, 1]))
    assert {k: v.tolist() for k, v in got.items()} == {"inst": [0, 0, 2], "gap_ns": [5.0, 7.0, 5.0], "n": [4, 2, 4]}
