"""A run as Chrome Trace Event Format JSON (opens in Perfetto / chrome://tracing): request phases and sim steps.

Sim runs: one process per instance, its batch steps on a "steps" track (plus a KV-blocks counter) and each
request's phases there (queue, prefill, transfer, decode) on lanes. Real runs: one "requests" process whose lanes
hold requests (client lag, waiting for the first token, streaming). Lanes are assigned greedily so slices on a
track never overlap. Timestamps are µs from run start. At most `max_requests` requests (earliest arrivals).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.eventlog import read_manifest, table_parts
from kvbench.present import fmt
from kvbench.units import ns_to_us

if TYPE_CHECKING:
    import duckdb
    import pandas

# Phase a kind opens (None: it only closes the open phase). Real and sim names differ where the meaning does.
_OPENS_SIM = {
    "SEND": "queue",
    "PREFILL_START": "prefill",
    "KV_XFER_START": "transfer",
    "DECODE_START": "decode",
    "PREEMPT": "queue (preempted)",
    "MIGRATE": "transfer",
    "PREFILL_END": None,
    "KV_XFER_END": None,
}
_OPENS_REAL = {"ARRIVE": "client lag", "SEND": "waiting first token", "FIRST_TOKEN": "streaming"}
_TERMINAL = ("FINISH", "ERROR", "REJECT", "CANCEL")
_FAILED = _TERMINAL[1:]
STEPS_PID, REQUESTS_PID = 0, 1


@dataclass(frozen=True)
class Slice:
    req_id: int
    name: str
    instance: str  # "" for real runs
    start_ns: int
    end_ns: int  # == start_ns for a failure marker (ERROR/REJECT/CANCEL), drawn as an instant event
    detail: str | None = None


def phases(rows: Iterable[tuple], sim: bool) -> Iterator[Slice]:
    """Rows (req_id, t_ns, kind, instance, detail) sorted by (req_id, t_ns) -> the request phases as slices.

    A small state machine per request: a kind in the table opens a phase (closing the open one); a terminal
    event closes it, and a failed end adds a marker carrying its detail. For sim runs a phase sits on the
    instance of the event that opened it (ROUTE names the instance the queue is on); zero-length phases are
    dropped."""
    opens = _OPENS_SIM if sim else _OPENS_REAL
    cur_req, open_ = None, None  # open_: [name, start_ns, instance]
    last_inst = ""
    for req_id, t, kind, inst, detail in rows:
        if req_id != cur_req:
            cur_req, open_, last_inst = req_id, None, ""
        inst = (inst or last_inst) if sim else ""
        if kind == "ROUTE" and open_ is not None:
            open_[2] = inst
        if kind == "FIRST_TOKEN" and sim and open_ is None:
            kind = "DECODE_START"  # colocated engines decode right after prefill without a DECODE_START
        if kind in opens or kind in _TERMINAL:
            if open_ is not None and t > open_[1]:
                yield Slice(req_id, open_[0], open_[2], open_[1], t)
            if kind in _FAILED:
                yield Slice(req_id, kind, inst, t, t, detail)
            name = opens.get(kind)
            open_ = [name, t, inst] if name else None
        last_inst = inst or last_inst


def assign_lanes(intervals: list[tuple[int, int, object]]) -> dict[object, int]:
    """Greedy interval partitioning: (start, end, key) -> lane per key; lowest free lane first, so a lane's
    intervals never overlap and the number of lanes equals the maximum overlap."""
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    lanes: dict[object, int] = {}
    for start, end, key in sorted(intervals, key=lambda x: (x[0], x[1])):
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (end, lane))
        lanes[key] = lane
    return lanes


def request_events(slices: list[Slice], sim: bool, pid_of: dict[str, int]) -> list[dict]:
    """Slices -> "X" events; lanes per process (instance), one lane per request span on that instance."""
    spans: dict[tuple[str, int], list[int]] = {}
    for s in slices:
        span = spans.setdefault((s.instance, s.req_id), [s.start_ns, s.end_ns])
        span[0], span[1] = min(span[0], s.start_ns), max(span[1], s.end_ns)
    by_inst: dict[str, list[tuple[int, int, object]]] = {}
    for (inst, req), (a, b) in spans.items():
        by_inst.setdefault(inst, []).append((a, b, req))
    lanes = {inst: assign_lanes(iv) for inst, iv in by_inst.items()}
    lane_base = 1 if sim else 0  # sim lane 0 of each instance is its steps track
    out = []
    for s in slices:
        e = {
            "ph": "X",
            "name": s.name,
            "cat": "request",
            "pid": pid_of[s.instance],
            "tid": lane_base + lanes[s.instance][s.req_id],
            "ts": ns_to_us(s.start_ns),
            "dur": ns_to_us(s.end_ns - s.start_ns),
            "args": {"req_id": s.req_id},
        }
        if s.name in _FAILED:  # an instant marker on the request's lane, with the failure's detail
            del e["dur"]
            e.update(ph="i", s="t", cat="failure", args={"req_id": s.req_id, "detail": s.detail or ""})
        out.append(e)
    return out


def step_events(steps: pandas.DataFrame, pid_of: dict[str, int]) -> list[dict]:
    """Sim steps rows (DataFrame) -> "X" slices on each instance's track 0, and a KV-blocks counter."""
    out = []
    for r in steps.itertuples(index=False):
        pid = pid_of[r.instance]
        out.append(
            {
                "ph": "X",
                "name": f"batch {r.batch}",
                "cat": "step",
                "pid": pid,
                "tid": STEPS_PID,
                "ts": ns_to_us(r.t_ns),
                "dur": ns_to_us(r.end_ns - r.t_ns),
                "args": {
                    "batch": int(r.batch),
                    "n_steps": int(r.n_steps),
                    "prefill_tokens": int(r.prefill_tokens),
                    "decode_tokens": int(r.decode_tokens),
                },
            }
        )
        out.append(
            {
                "ph": "C",
                "name": "kv_blocks_used",
                "pid": pid,
                "ts": ns_to_us(r.t_ns),
                "args": {"used": int(r.kv_blocks_used)},
            }
        )
    return out


def metadata_events(pid_of: dict[str, int], lanes_per_pid: dict[int, int], sim: bool) -> list[dict]:
    out = []
    for inst, pid in sorted(pid_of.items(), key=lambda kv: kv[1]):
        name = (inst or "unrouted") if sim else "requests"
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for tid in range(lanes_per_pid.get(pid, 0)):
            label = "steps" if sim and tid == STEPS_PID else f"lane {tid - (1 if sim else 0)}"
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
    return out


# Lifecycle order breaks ties between events of one request at the same t_ns.
_RANK = (
    "ARRIVE",
    "SEND",
    "ROUTE",
    "PREEMPT",
    "MIGRATE",
    "PREFILL_START",
    "PREFILL_END",
    "KV_XFER_START",
    "KV_XFER_END",
    "DECODE_START",
    "FIRST_TOKEN",
    "LAST_TOKEN",
) + _TERMINAL
DEFAULT_MAX_REQUESTS = 20_000
MAX_STEPS = 200_000  # step rows kept (earliest first) within the selected requests' time window


def _rank_sql() -> str:
    return "CASE kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(_RANK)) + " ELSE 99 END"


def _read(con: duckdb.DuckDBPyConnection, run_dir: Path, max_requests: int) -> tuple[list[tuple], int]:
    """(event rows of the first `max_requests` requests by arrival, total request count)."""
    files = table_parts(run_dir, "events")
    if not files:
        return [], 0  # a run killed before its first flush: an empty trace, not an error
    con.read_parquet(files).create_view("events")  # paths are values, never pasted into SQL
    con.execute(
        "CREATE TEMP TABLE sel AS SELECT req_id, min(t_ns) AS t0 FROM events GROUP BY req_id "
        "ORDER BY t0, req_id LIMIT ?",
        [max_requests],
    )
    counted = con.execute("SELECT count(DISTINCT req_id) FROM events").fetchone()
    total = int(counted[0]) if counted else 0
    rows = con.execute(
        f"SELECT req_id, t_ns, CAST(kind AS VARCHAR), instance, "
        f"CASE WHEN kind IN ('ERROR', 'REJECT', 'CANCEL') THEN detail END FROM events "
        f"WHERE req_id IN (SELECT req_id FROM sel) AND kind <> 'CHUNK' "
        f"ORDER BY req_id, t_ns, {_rank_sql()}"
    ).fetchall()
    return rows, total


def _read_steps(con: duckdb.DuckDBPyConnection, run_dir: Path, t_lo: int, t_hi: int) -> pandas.DataFrame | None:
    files = table_parts(run_dir, "steps")
    if not files:
        return None
    return con.execute(
        "SELECT instance, t_ns, end_ns, n_steps, batch, prefill_tokens, decode_tokens, "
        "kv_blocks_used FROM read_parquet(?) "
        "WHERE end_ns >= ? AND t_ns <= ? ORDER BY instance, t_ns LIMIT ?",
        [files, t_lo, t_hi, MAX_STEPS],
    ).df()


def build_trace(run_dir: str | Path, max_requests: int = DEFAULT_MAX_REQUESTS) -> dict:
    """The Chrome trace of a run as a dict ({"traceEvents": [...], "otherData": {...}})."""
    import duckdb

    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # stdout is the user's; rich shows progress
    rows, total = _read(con, run_dir, max_requests)
    sim = (manifest.get("target") or {}).get("kind") == "sim" or any((run_dir / "steps").glob("*.parquet"))
    slices = list(phases(rows, sim))
    t_lo = min((r[1] for r in rows), default=0)
    t_hi = max((r[1] for r in rows), default=0)
    steps = _read_steps(con, run_dir, t_lo, t_hi) if sim else None
    instances = set(s.instance for s in slices) | (set(steps.instance) if steps is not None else set())
    pid_of = {inst: i + 1 for i, inst in enumerate(sorted(instances, key=lambda x: (x == "", x)))}
    events = (step_events(steps, pid_of) if steps is not None else []) + request_events(slices, sim, pid_of)
    lanes: dict[int, int] = {pid: 1 if sim else 0 for pid in pid_of.values()}
    for e in events:
        if "tid" in e:
            lanes[e["pid"]] = max(lanes[e["pid"]], e["tid"] + 1)
    shown = min(total, max_requests)
    note = f"{fmt.count(shown)} of {fmt.count(total)} requests"
    note += "" if shown == total else " (earliest arrivals; --max-requests)"
    if steps is not None and len(steps) >= MAX_STEPS:
        note += f"; steps truncated to the first {fmt.count(MAX_STEPS)} rows"
    return {
        "traceEvents": metadata_events(pid_of, lanes, sim) + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run_id": str(manifest.get("run_id", "")),
            "kind": "sim" if sim else "real",
            "requests": shown,
            "requests_total": total,
            "note": note,
        },
    }


def write_trace(run_dir: str | Path, out: str | Path, max_requests: int = DEFAULT_MAX_REQUESTS) -> dict:
    """Write the trace JSON to `out`; returns its otherData (counts and note)."""
    import orjson

    trace = build_trace(run_dir, max_requests)
    Path(out).write_bytes(orjson.dumps(trace))
    return trace["otherData"]
