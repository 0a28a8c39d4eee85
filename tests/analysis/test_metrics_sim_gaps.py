"""Simulator token gaps (ASOF + row expansion over merged step segments) against a brute-force step enumeration."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from support.metrics_logs import ev, req, step, write_run
from support.step_logs import brute_force, sim_logs

from kvbench.analysis.metrics import open_runs, per_request


@settings(max_examples=25, deadline=None)
@given(sim_logs())
def test_sim_gaps_equal_brute_force(tmp_path_factory, log):
    rows, reqs = log
    events = []
    for rid, inst, s, e in reqs:
        events += [
            ev(0, rid, "ARRIVE", tokens=10),
            ev(0, rid, "SEND"),
            ev(s, rid, "FIRST_TOKEN", "p0", 1),
            ev(s, rid, "DECODE_START", inst),
            ev(e, rid, "LAST_TOKEN", inst, 50),
            ev(e, rid, "FINISH", inst, 50),
        ]
    steps = [step(inst, t0, t1, n, 1, 1) for inst, rs in rows.items() for t0, t1, n in rs]
    run = write_run(tmp_path_factory.mktemp("g") / "r", events, [req(r[0], 0, 10, 50) for r in reqs], steps)
    con = open_runs([run])
    per_request(con)
    got = con.execute("SELECT req_id, round(gap_ns / 1e6)::INT, sum(n)::INT FROM token_gaps GROUP BY ALL").fetchall()
    by_req: dict[int, Counter] = {}
    for rid, gap, n in got:
        by_req.setdefault(rid, Counter())[gap] += n
    for rid, inst, s, e in reqs:
        assert by_req.get(rid, Counter()) == brute_force(rows, inst, s, e), (rid, inst, s, e)
