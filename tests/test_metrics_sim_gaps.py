"""Simulator token gaps (ASOF + row expansion over merged step segments) against a brute-force step enumeration."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from metrics_logs import ev, req, step, write_run

from kvbench.metrics import open_runs, per_request

GAPS_MS = (5, 7, 10, 15)  # step lengths; back-to-back rows with equal lengths merge exactly


@st.composite
def sim_logs(draw):
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for inst in ("d0", "d1"):
        t, out = 0, []
        for _ in range(draw(st.integers(1, 6))):
            t += draw(st.sampled_from((0, 0, 3, 20)))  # idle time between rows, often none
            gap, n = draw(st.sampled_from(GAPS_MS)), draw(st.integers(1, 8))
            out.append((t, t + gap * n, n))
            t += gap * n
        rows[inst] = out
    end = max(r[-1][1] for r in rows.values())
    reqs = []
    for rid in range(draw(st.integers(1, 6))):
        s = draw(st.integers(0, end))
        e = draw(st.integers(s + 1, end + 10))
        reqs.append((rid, draw(st.sampled_from(("d0", "d1"))), s, e))
    return rows, reqs


def brute_force(rows, inst: str, s: int, e: int) -> Counter:
    """Every step of the instance that starts at or after s and ends at or before e, by its length (ms)."""
    c: Counter = Counter()
    for t0, t1, n in rows[inst]:
        d = (t1 - t0) // n
        for k in range(n):
            if t0 + k * d >= s and t0 + (k + 1) * d <= e:
                c[d] += 1
    return c


@settings(max_examples=25, deadline=None)
@given(sim_logs())
def test_sim_gaps_equal_brute_force(tmp_path_factory, log):
    rows, reqs = log
    events = []
    for rid, inst, s, e in reqs:
        events += [ev(0, rid, "ARRIVE", tokens=10), ev(0, rid, "SEND"), ev(s, rid, "FIRST_TOKEN", "p0", 1),
                   ev(s, rid, "DECODE_START", inst), ev(e, rid, "LAST_TOKEN", inst, 50), ev(e, rid, "FINISH", inst, 50)]
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
