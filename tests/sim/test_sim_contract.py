"""The Target contract for the sim, through the real Replayer and Parquet log: session turns submitted from
inside emit, exactly one terminal event per request, events in time order, the steps table written."""

from __future__ import annotations

import random

import duckdb
import pytest

from kvbench.eventlog import EventLog, table_glob
from kvbench.records import Request
from kvbench.replayer import Replayer
from kvbench.target import RunContext
from kvbench.targets import build, resolve

MS = 1_000_000


def _sessions(n: int = 80) -> list[Request]:
    rng = random.Random(11)
    reqs, t = [], 0
    for i in range(n):
        t += rng.randrange(0, 40) * MS
        session = i % 6 if i % 3 else -1
        turn = i // 6 if session >= 0 else 0
        blocks = tuple(range(session * 100, session * 100 + turn + 2)) if session >= 0 else (10_000 + i,)
        reqs.append(
            Request(
                i,
                t,
                512 * len(blocks) - 7,
                rng.randrange(0, 120),
                blocks,
                session_id=session,
                turn=turn,
                think_ns=20 * MS,
            )
        )
    return reqs


@pytest.mark.parametrize("preset", ["pd-2p2d", "colocated-8", "cpd", "star", "spec-decode"])
def test_sim_contract_through_the_replayer(tmp_path, preset):
    reqs = _sessions()
    log = EventLog(tmp_path)
    stats = Replayer(build(resolve(f"sim:{preset}"), RunContext(0, tmp_path, log)), log).run(iter(reqs))
    log.close()
    assert stats.status == "complete" and stats.submitted == len(reqs) == stats.finished
    glob = table_glob(tmp_path)
    ends = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, count(*) FROM read_parquet('{glob}') WHERE kind IN "
            "('FINISH','ERROR','REJECT','CANCEL') GROUP BY 1"
        )
        .fetchall()
    )
    assert len(ends) == len(reqs) and {c for _, c in ends} == {1}
    # a later turn of a session arrives only after the previous turn finished (+ think time)
    gaps = (
        duckdb.connect()
        .execute(f"""
        WITH f AS (SELECT req_id, max(t_ns) FILTER (WHERE kind = 'FINISH') fin,
                          min(t_ns) FILTER (WHERE kind = 'SEND') sent FROM read_parquet('{glob}') GROUP BY 1),
             r AS (SELECT req_id, session_id, turn FROM read_parquet('{table_glob(tmp_path, "requests")}'))
        SELECT min(b.sent - a.fin) FROM r ra JOIN r rb ON ra.session_id = rb.session_id AND rb.turn = ra.turn + 1
        JOIN f a ON a.req_id = ra.req_id JOIN f b ON b.req_id = rb.req_id WHERE ra.session_id >= 0""")
        .fetchone()[0]
    )
    assert gaps >= 20 * MS
    steps = (
        duckdb.connect()
        .execute(
            f"SELECT count(*), min(end_ns - t_ns), min(n_steps) FROM read_parquet('{table_glob(tmp_path, 'steps')}')"
        )
        .fetchone()
    )
    assert steps[0] > 0 and steps[1] > 0 and steps[2] >= 1
