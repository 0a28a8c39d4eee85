"""The Target contract, checked for every target that runs here: one terminal event per request, in time order."""

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

VIRTUAL_TARGETS = [
    "fixed:ttft_ms=20,itl_ms=5,servers=2",
    "fixed:ttft_ms=1,itl_ms=1,servers=0,fail_every=3",
    "sim",
    "sim:colocated-8",
    "sim:mooncake-8p8d",
    "sim:star",
    "sim:spec-decode",
    "sim:cpd",
]


def _workload(n: int = 60) -> list[Request]:
    rng = random.Random(7)
    reqs, t = [], 0
    for i in range(n):
        t += rng.randrange(0, 30) * MS
        blocks = tuple(range(i % 5, i % 5 + rng.randrange(1, 4)))
        session = i % 4 if i % 2 else -1
        reqs.append(
            Request(
                i,
                t,
                512 * len(blocks),
                rng.randrange(0, 40),
                blocks,
                session_id=session,
                turn=i // 4 if session >= 0 else 0,
                think_ns=5 * MS,
            )
        )
    return reqs


def check_contract(run_dir, n: int) -> None:
    glob = table_glob(run_dir)
    terminal = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, count(*) FROM read_parquet('{glob}') "
            f"WHERE kind IN ('FINISH','ERROR','REJECT','CANCEL') GROUP BY 1"
        )
        .fetchall()
    )
    assert len(terminal) == n and {c for _, c in terminal} == {1}
    # Within a request: ARRIVE first, the terminal event last, and times never go backwards.
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT req_id, list(kind ORDER BY t_ns, CASE kind WHEN 'ARRIVE' THEN 0 "
            f"WHEN 'FINISH' THEN 2 WHEN 'ERROR' THEN 2 WHEN 'REJECT' THEN 2 WHEN 'CANCEL' THEN 2 "
            f"ELSE 1 END) FROM read_parquet('{glob}') GROUP BY 1"
        )
        .fetchall()
    )
    for req_id, kinds in rows:
        assert kinds[-1] in ("FINISH", "ERROR", "REJECT", "CANCEL"), (req_id, kinds)
        assert kinds[0] in ("ARRIVE", "CANCEL"), (req_id, kinds)
    first_after_arrive = (
        duckdb.connect()
        .execute(f"""
        SELECT count(*) FROM read_parquet('{glob}') a JOIN read_parquet('{glob}') e USING (req_id)
        WHERE a.kind = 'ARRIVE' AND e.t_ns < a.t_ns""")
        .fetchone()[0]
    )
    assert first_after_arrive == 0


@pytest.mark.parametrize("target", VIRTUAL_TARGETS)
def test_virtual_target_contract(tmp_path, target):
    reqs = _workload()
    log = EventLog(tmp_path)
    stats = Replayer(build(resolve(target), RunContext(0, tmp_path, log)), log).run(iter(reqs))
    log.close()
    assert stats.status == "complete" and stats.submitted == len(reqs)
    check_contract(tmp_path, len(reqs))


@pytest.mark.parametrize("target", VIRTUAL_TARGETS)
def test_an_interrupt_cancels_every_open_request_at_that_moment(tmp_path, target):
    # the replayer's stop path: its first progress report (at the 16th ended request) raises as Ctrl-C would
    stopped: list[int] = []

    def progress(stats):
        if not stopped:
            stopped.append(stats.last_t_ns)
            raise KeyboardInterrupt

    reqs = _workload(200)
    log = EventLog(tmp_path)
    stats = Replayer(build(resolve(target), RunContext(0, tmp_path, log)), log, progress=progress).run(iter(reqs))
    log.close()
    assert stats.status == "interrupted" and stats.cancelled > 0
    check_contract(tmp_path, stats.submitted)
    glob = table_glob(tmp_path)
    cancels = duckdb.connect().execute(f"SELECT DISTINCT t_ns FROM read_parquet('{glob}') WHERE detail = 'interrupted'")
    assert cancels.fetchall() == [(stopped[0],)]  # all at the interruption, none at a future arrival
    # a request with only its CANCEL was not yet due (its intended release, as submitted, is after the stop)
    early = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{table_glob(tmp_path, 'requests')}') r JOIN (SELECT req_id FROM "
        f"read_parquet('{glob}') GROUP BY req_id HAVING list(detail) = ['interrupted']) USING (req_id) "
        f"WHERE r.arrival_ns < {stopped[0]}"
    )
    assert early.fetchone() == (0,)
