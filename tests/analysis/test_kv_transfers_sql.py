"""kv_transfers.sql by hand: pairing by order per request, the wire start cut from the detail, arrival fallback."""

from __future__ import annotations

import duckdb

from kvbench.analysis.sqlfiles import subquery

START, END = "KV_XFER_START", "KV_XFER_END"


def _transfers(events: list[tuple], arrivals: dict[int, tuple[int | None, int]], requested: dict[int, int]) -> list:
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE events (run VARCHAR, req_id BIGINT, kind VARCHAR, t_ns BIGINT, tier VARCHAR, "
        "nbytes BIGINT, instance VARCHAR, detail VARCHAR)"
    )
    for req, kind, t, nbytes, detail in events:
        con.execute("INSERT INTO events VALUES ('r', ?, ?, ?, 'rdma', ?, 'p0', ?)", [req, kind, t, nbytes, detail])
    con.execute("CREATE TEMP TABLE request_events (run VARCHAR, req_id BIGINT, arrive_ns BIGINT, first_ns BIGINT)")
    for req, (arrive, first) in arrivals.items():
        con.execute("INSERT INTO request_events VALUES ('r', ?, ?, ?)", [req, arrive, first])
    con.execute("CREATE TEMP TABLE requests (run VARCHAR, req_id BIGINT, arrival_ns BIGINT)")
    for req, arrival in requested.items():
        con.execute("INSERT INTO requests VALUES ('r', ?, ?)", [req, arrival])
    con.execute("CREATE TEMP VIEW kv_events AS SELECT * FROM events")  # what tables.py pairs without per-request parts
    query = f"SELECT req_id, nbytes, start_ns, end_ns, duration_ns, in_ttft_ns FROM ({subquery('kv_transfers')})"
    return con.execute(query + " ORDER BY req_id, start_ns").fetchall()


def test_wire_start_from_the_detail_in_every_form():
    events = [
        (1, START, 10, 100, "to d0 layerwise_from_ns=4"),  # the simulator's form: cut without the regexp
        (1, END, 20, None, None),
        (2, START, 10, 100, "layerwise_from_ns=7;x"),  # digits then not a space: the regexp finds 7
        (2, END, 20, 200, None),
        (3, START, 10, 100, "layerwise_from_ns=x layerwise_from_ns=9"),  # the first has no digits: the second's
        (4, START, 10, 100, None),  # no detail: START's time; no END: open
    ]
    got = _transfers(events, {r: (0, 30) for r in (1, 2, 3, 4)}, {})
    assert got == [
        (1, 100, 4, 20, 16, 10),  # in TTFT: [max(10, 0), min(20, 30)] = 10 (from START's time, not the wire's)
        (2, 200, 7, 20, 13, 10),  # END's nbytes over START's
        (3, 100, 9, None, None, 20),  # no END: in TTFT up to FIRST_TOKEN (least() passes over the NULL), 30 - 10
        (4, 100, 10, None, None, 20),
    ]


def test_several_transfers_pair_by_order_and_arrival_falls_back_to_requests():
    events = [(5, START, 50, 1, None), (5, END, 40, 2, None), (5, START, 10, 3, None), (5, END, 20, 4, None)]
    events += [(6, START, 10, 5, None), (6, END, 15, 6, None)]
    # request 6 has no ARRIVE: arrival 12 from the requests table, so 3 of its 5 ns are in its TTFT window
    got = _transfers(events, {5: (0, 45), 6: (None, 100)}, {5: 0, 6: 12})
    assert got == [(5, 4, 10, 20, 10, 10), (5, 2, 50, 40, -10, 0), (6, 6, 10, 15, 5, 3)]
