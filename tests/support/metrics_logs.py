"""Hand-built event logs for the metrics, summary, compare and gate tests (times given in ms, written in ns)."""

from __future__ import annotations

from pathlib import Path

from kvbench.eventlog import SCHEMA_VERSION, EventLog, write_manifest
from kvbench.records import Event
from kvbench.units import ms_to_ns


def ev(
    t_ms: float,
    rid: int,
    kind: str,
    instance: str | None = None,
    tokens: int | None = None,
    cached: int | None = None,
    tier: str | None = None,
    nbytes: int | None = None,
    detail: str | None = None,
) -> Event:
    return Event(ms_to_ns(t_ms), rid, kind, instance, tokens, cached, tier, nbytes, detail)


def req(rid: int, arrival_ms: float, input_tokens: int, output_tokens: int, trace_reuse: int | None = 0) -> tuple:
    """A requests-table row (schema order of kvbench.eventlog.REQUESTS)."""
    return (
        rid,
        -1,
        0,
        ms_to_ns(arrival_ms),
        input_tokens,
        output_tokens,
        0,
        512,
        -(-input_tokens // 512),
        trace_reuse,
        "hand",
    )


def step(instance: str, t_ms: float, end_ms: float, n: int, batch: int, kv_used: int, kv_total: int = 100) -> tuple:
    return (instance, ms_to_ns(t_ms), ms_to_ns(end_ms), n, batch, 0, batch, kv_used, kv_total)


def write_run(
    run_dir: Path, events: list[Event], requests: list[tuple], steps: list[tuple] = (), manifest: dict | None = None
) -> Path:
    """A run directory as kvbench writes it: events/, requests/, steps/ parts and run.json."""
    log = EventLog(run_dir)
    for e in events:
        log.emit(e)
    for r in requests:
        log.requests.append(r)
    for s in steps:
        log.table("steps").append(s)
    log.close()
    write_manifest(
        run_dir,
        {"schema_version": SCHEMA_VERSION, "run_id": run_dir.name, "status": "complete", "seed": 0, **(manifest or {})},
    )
    return run_dir


# A real-endpoint-like run (ms). Requests:
#  0 finished: arrive 0, send 1, first 100, chunks 110 130 160 (gaps 10 20 30), 4 tokens, cached 512 of 1024
#  1 finished, one token: arrive 50, first 250
#  2 ERROR at 300 (server_error), 3 REJECT at 151 (rate_limited), 4 still running (first 260, chunk 280)
#  5 finished: arrive 300, send 310, first 400, 11 gaps: 9 x 5, 50, 60 -> last 555, 12 tokens, finish 560
#  6 cancelled unsent at 320 (requests row only)
def real_run(run_dir: Path) -> Path:
    e = [
        ev(0, 0, "ARRIVE", tokens=1024),
        ev(1, 0, "SEND"),
        ev(100, 0, "FIRST_TOKEN", "ep", 1),
        ev(110, 0, "CHUNK", "ep", 1),
        ev(130, 0, "CHUNK", "ep", 1),
        ev(160, 0, "CHUNK", "ep", 1),
        ev(160, 0, "LAST_TOKEN", "ep", 4),
        ev(160, 0, "FINISH", "ep", 4, cached=512),
        ev(50, 1, "ARRIVE", tokens=512),
        ev(50, 1, "SEND"),
        ev(250, 1, "FIRST_TOKEN", "ep", 1),
        ev(250, 1, "LAST_TOKEN", "ep", 1),
        ev(250, 1, "FINISH", "ep", 1, cached=0),
        ev(100, 2, "ARRIVE", tokens=256),
        ev(105, 2, "SEND"),
        ev(300, 2, "ERROR", "ep", detail="server_error: boom"),
        ev(150, 3, "ARRIVE", tokens=256),
        ev(150, 3, "SEND"),
        ev(151, 3, "REJECT", "ep", detail="rate_limited: 429"),
        ev(200, 4, "ARRIVE", tokens=256),
        ev(200, 4, "SEND"),
        ev(260, 4, "FIRST_TOKEN", "ep", 1),
        ev(280, 4, "CHUNK", "ep", 1),
        ev(300, 5, "ARRIVE", tokens=1024),
        ev(310, 5, "SEND"),
        ev(400, 5, "FIRST_TOKEN", "ep", 1),
    ]
    t = 400
    for gap in [5] * 9 + [50, 60]:
        t += gap
        e.append(ev(t, 5, "CHUNK", "ep", 1))
    e += [
        ev(555, 5, "LAST_TOKEN", "ep", 12),
        ev(560, 5, "FINISH", "ep", 12, cached=256),
        ev(320, 6, "CANCEL", detail="session: an earlier turn did not finish"),
    ]
    r = [
        req(0, 0, 1024, 4, 512),
        req(1, 50, 512, 1, 0),
        req(2, 100, 256, 8),
        req(3, 150, 256, 8),
        req(4, 200, 256, 8),
        req(5, 300, 1024, 12, 1024),
        req(6, 320, 256, 8),
    ]
    return write_run(run_dir, e, r)


# A simulator-like run (ms). Instance d0 steps: [0,100) 10 steps batch 4 kv 50 %, [100,160) 3 steps batch 2 kv 30 %,
# [200,260) 2 steps batch 1 kv 10 %; d1: [0,150) 1 step (must never leak into d0's requests).
#  A (id 0): arrive 0, route 2, prefill 10 on p0 (256 cached from dram), KV load dram 12..20 (2 MB), first 40,
#     P->D transfer 40..45 over rdma (1 MB), decode on d0 from 45, last 230 (11 tokens), finish 300
#  B (id 1): arrive 50, send 50, prefill 60 on d0, first 100 on d0 (colocated), preempted once, last 140 (3 tokens)
def sim_run(run_dir: Path) -> Path:
    e = [
        ev(0, 0, "ARRIVE", tokens=1024),
        ev(0, 0, "SEND"),
        ev(2, 0, "ROUTE", "p0"),
        ev(10, 0, "PREFILL_START", "p0", 768, 256, tier="dram"),
        ev(12, 0, "KV_XFER_START", "p0", tier="dram", nbytes=2_000_000),
        ev(20, 0, "KV_XFER_END", "p0", tier="dram", nbytes=2_000_000),
        ev(38, 0, "PREFILL_END", "p0"),
        ev(40, 0, "FIRST_TOKEN", "p0", 1),
        ev(40, 0, "KV_XFER_START", "p0", tier="rdma", nbytes=1_000_000),
        ev(45, 0, "KV_XFER_END", "d0", tier="rdma", nbytes=1_000_000),
        ev(45, 0, "DECODE_START", "d0"),
        ev(230, 0, "LAST_TOKEN", "d0", 11),
        ev(300, 0, "FINISH", "d0", 11, cached=256),
        ev(50, 1, "ARRIVE", tokens=512),
        ev(50, 1, "SEND"),
        ev(60, 1, "PREFILL_START", "d0", 512, 0),
        ev(70, 1, "PREEMPT", "d0"),
        ev(80, 1, "PREFILL_START", "d0", 512, 0),
        ev(100, 1, "FIRST_TOKEN", "d0", 1),
        ev(140, 1, "LAST_TOKEN", "d0", 3),
        ev(140, 1, "FINISH", "d0", 3, cached=0),
    ]
    s = [
        step("d0", 0, 100, 10, 4, 50),
        step("d0", 100, 160, 3, 2, 30),
        step("d0", 200, 260, 2, 1, 10),
        step("d1", 0, 150, 1, 1, 5),
    ]
    return write_run(run_dir, e, [req(0, 0, 1024, 11, 512), req(1, 50, 512, 3, 0)], s)
