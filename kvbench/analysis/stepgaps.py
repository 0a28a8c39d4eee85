"""Simulator token gaps in closed form: step segments, request spans, pooled ITL per segment and TBT per request.

Same definitions as token_gaps.sql and tbt.sql (which say what a simulator request's gaps are), computed with numpy
over arrays instead of expanding every request into its step segments in SQL: a request decoding through segments
lo..hi gets every step of the segments strictly between and a partial count at lo and hi, so the pooled ITL weight
of a segment is (requests passing through it) x (its steps) + the partial counts, found with a difference array;
TBT sorts each request's segments by gap length only (a request spans tens of segments, not its thousands of gaps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.analysis.sqlfiles import sql_text

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pyarrow as pa

# rows of one block of the TBT expansion (request x segment, ~60 B a row): bounds the memory of long runs, and
# blocks of this size run faster than larger ones (each array of a block stays in the CPU's caches)
BLOCK_ROWS = 64_000


def segments(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge back-to-back steps rows (sorted by inst, t_ns) of one instance and 1 % bin into segments, as
    token_gaps.sql describes; returns inst, t_ns, end_ns, n_steps, gap_ns per segment, in that order."""
    import numpy as np

    inst, t, end = rows["inst"], rows["t_ns"], rows["end_ns"]
    new = np.ones(len(t), bool)
    new[1:] = (inst[1:] != inst[:-1]) | (rows["bin"][1:] != rows["bin"][:-1]) | (t[1:] != end[:-1])
    starts = np.flatnonzero(new)
    if not len(starts):
        empty = np.zeros(0, np.int64)
        return {"inst": empty, "t_ns": empty, "end_ns": empty, "n_steps": empty, "gap_ns": np.zeros(0)}
    seg = {
        "inst": inst[starts],
        "t_ns": t[starts],
        "end_ns": np.maximum.reduceat(end, starts),
        "n_steps": np.add.reduceat(rows["n_steps"], starts),
    }
    seg["gap_ns"] = (seg["end_ns"] - seg["t_ns"]).astype(np.float64) / seg["n_steps"]
    return seg


def spans(seg: dict[str, np.ndarray], req: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per request decoding on `inst` over [s_ns, e_ns]: lo = first segment of its instance ending after s_ns,
    hi = last one starting before e_ns (indices into seg); requests with no such segments are left out."""
    import numpy as np

    lo = np.full(len(req["inst"]), -1, np.int64)
    hi = np.full(len(req["inst"]), -2, np.int64)
    bounds = np.searchsorted(seg["inst"], np.arange(int(req["inst"].max(initial=-1)) + 2))
    order = np.argsort(req["inst"], kind="stable")
    cuts = np.searchsorted(req["inst"][order], np.arange(len(bounds)))
    for i in range(len(bounds) - 1):
        a, b, sel = bounds[i], bounds[i + 1], order[cuts[i] : cuts[i + 1]]
        if a == b or not len(sel):
            continue
        first = a + np.searchsorted(seg["end_ns"][a:b], req["s_ns"][sel], side="right")
        last = a + np.searchsorted(seg["t_ns"][a:b], req["e_ns"][sel], side="left") - 1
        ok = (first < b) & (last >= a)
        lo[sel[ok]], hi[sel[ok]] = first[ok], last[ok]
    keep = hi >= lo
    return {**{k: v[keep] for k, v in req.items()}, "lo": lo[keep], "hi": hi[keep]}


def partial(seg: dict[str, np.ndarray], j: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Steps of segment j inside [s, e]: (steps ended by e) - (steps started before s), token_gaps.sql's formula."""
    import numpy as np

    t, length, n = seg["t_ns"][j], seg["end_ns"][j] - seg["t_ns"][j], seg["n_steps"][j]
    huge = length > (1 << 62) // n  # length * n overflows int64 (a segment over ~50 min of 1 ms steps)
    if huge.any():  # exact in Python integers, rare
        t, length, n, s, e = (np.asarray(x).astype(object) for x in (t, length, n, s, e))
    ended = (np.clip(e - t, 0, length) * n) // length
    started = (np.clip(s - t, 0, length) * n + length - 1) // length
    return (ended - started).astype(np.int64)


def itl_weights(seg: dict[str, np.ndarray], sp: dict[str, np.ndarray]) -> np.ndarray:
    """Pooled gaps per segment over the finished requests' spans: steps x requests passing through + partials."""
    import numpy as np

    size = len(seg["t_ns"])
    lo, hi, s, e = (sp[k][sp["finished"]] for k in ("lo", "hi", "s_ns", "e_ns"))
    at_lo, at_hi = _end_counts(seg, lo, hi, s, e)
    # float sums of integer counts are exact below 2**53 gaps
    weight = np.rint(np.bincount(lo, at_lo, size) + np.bincount(hi, at_hi, size)).astype(np.int64)
    multi = hi > lo  # passes through lo + 1 .. hi - 1: +1 from lo + 1, -1 from hi
    through = np.cumsum(np.bincount(lo[multi] + 1, minlength=size + 1) - np.bincount(hi[multi], minlength=size + 1))
    return weight + through[:size] * seg["n_steps"]


def _end_counts(
    seg: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gaps a span gets at lo and at hi (0 where hi == lo: lo's count is the whole span), negatives as 0."""
    import numpy as np

    at_lo = np.maximum(partial(seg, lo, s, e), 0)
    at_hi = np.where(hi > lo, np.maximum(partial(seg, hi, s, e), 0), 0)
    return at_lo, at_hi


def tbt(
    seg: dict[str, np.ndarray], sp: dict[str, np.ndarray], rank: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """TBT (ns) per span, as tbt.sql: mean of the span's longest k = ceil(G / 10) of its G gaps (NaN when G = 0).
    Spans are expanded to (span, segment) rows block by block, each block sorted once by (span, gap descending).
    rank: _rank_longest_first of the segments' gaps, when the caller has it."""
    import numpy as np

    out = np.full(len(sp["lo"]), np.nan)
    rank = rank or _rank_longest_first(seg["gap_ns"])  # (rank per segment, gap per rank)
    m = sp["hi"] - sp["lo"] + 1
    cum = np.cumsum(m)
    start = 0
    while start < len(m):
        stop = max(start + 1, int(np.searchsorted(cum, cum[start] - m[start] + BLOCK_ROWS, side="right")))
        block = slice(start, stop)
        out[block] = _tbt_block(seg, rank, {k: v[block] for k, v in sp.items()}, m[block])
        start = stop
    return out


def _rank_longest_first(gap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense rank of each value (0 = the largest; equal values share a rank) and the distinct values by rank."""
    import numpy as np

    distinct, inverse = np.unique(gap, return_inverse=True)  # ascending
    return len(distinct) - 1 - inverse, distinct[::-1]


def pooled_itl(
    seg: dict[str, np.ndarray], weight: np.ndarray, rank: tuple[np.ndarray, np.ndarray], run_no: np.ndarray
) -> dict[str, np.ndarray]:
    """step_itl's rows: the pooled gaps (itl_weights) summed per run and distinct gap length, each run's gaps in
    ascending order (what itl.sql groups them into; segments of equal gaps are ~half of a long run's).
    run_no: the run's number (0, 1, ...) of each instance; `inst` of a row is the first instance of its run."""
    import numpy as np

    rank_of, gap_of = rank
    size, runs = len(gap_of), int(run_no.max(initial=-1)) + 1
    key = run_no[seg["inst"]].astype(np.int64) * size + (size - 1 - rank_of)  # (run, ascending gap)
    # float sums of integer counts are exact below 2**53 gaps
    total = np.rint(np.bincount(key, weight, runs * size)).astype(np.int64)
    at = np.flatnonzero(total)
    run, ascending = np.divmod(at, size)
    first_inst = np.searchsorted(run_no, np.arange(runs))  # instances are numbered in (run, instance) order
    return {"inst": first_inst[run], "gap_ns": gap_of[::-1][ascending], "n": total[at]}


def _tbt_block(
    seg: dict[str, np.ndarray], rank: tuple[np.ndarray, np.ndarray], sp: dict[str, np.ndarray], m: np.ndarray
) -> np.ndarray:
    """TBT of the spans of one block; m = segments each spans."""
    import numpy as np

    owner = np.repeat(np.arange(len(m), dtype=np.int64), m)
    first = np.cumsum(m) - m
    place = np.arange(len(owner)) - np.repeat(first, m)  # of each (span, segment) row within its span
    j = np.repeat(sp["lo"], m) + place  # its segment
    n = seg["n_steps"][j]
    n[first], n[first + m - 1] = 0, 0  # the ends get their partial counts (at hi: 0 when hi == lo)
    at_lo, at_hi = _end_counts(seg, sp["lo"], sp["hi"], sp["s_ns"], sp["e_ns"])
    n[first + m - 1] += at_hi
    n[first] += at_lo
    rank_of, gap_of = rank
    order, r = _longest_first(owner, rank_of[j], place, len(gap_of), first)
    n, gap = n[order], gap_of[r]  # owner stays: spans keep their places, sorted within
    total = np.bincount(owner, n, len(m))  # G per span
    k = np.ceil(total / 10.0)
    before = np.cumsum(n) - n - np.repeat(np.cumsum(total) - total, m)
    take = np.clip(k[owner] - before, 0, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.bincount(owner, gap * take, len(m)) / k, np.nan)


def _longest_first(
    owner: np.ndarray, r: np.ndarray, place: np.ndarray, distinct: int, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The order of a block's rows by span, then gap rank r (longest first), then place in the span, and r in that
    order. One integer per row: unique, so numpy's unstable (vectorised) sort gives what a stable argsort by (span,
    r) would, quicker; the stable argsort where that integer could pass 62 bits."""
    import numpy as np

    width = int(place.max(initial=0)) + 1
    if (int(owner[-1]) + 1) * distinct * width < 1 << 62:
        key = (owner * distinct + r) * width + place
        key.sort()
        rest, place = np.divmod(key, width)
        return first[owner] + place, rest - owner * distinct
    order = np.argsort(owner * (distinct + 1) + r, kind="stable")
    return order, r[order]


def build(con: duckdb.DuckDBPyConnection) -> None:
    """Temp table step_instances and views step_segments (row_no = segment index), step_spans (lo, hi: row_no),
    step_itl (run, gap_ns, n over finished requests; a row per run and gap length) and step_tbt (run, req_id,
    tbt_ns); empty without steps."""
    store(con, compute(segments_of(con), *requests_of(con)))


def segments_of(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """The segments() of the steps rows (step_rows.sql), with the temp table step_instances `con` numbers them by:
    this needs no per-request table, so a second connection can run it while the first pivots the requests."""
    con.execute(sql_text("step_instances"))
    return segments(con.execute(sql_text("step_rows")).fetchnumpy())


def requests_of(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The temp table step_instances, the decoding requests (step_requests.sql) and each instance's run number as
    numpy columns: with segments_of(), what compute() needs, so it can run while `con` does other work."""
    import numpy as np

    con.execute(sql_text("step_instances"))
    req = {k: np.asarray(v) for k, v in con.execute(sql_text("step_requests")).fetchnumpy().items()}
    run_no = np.asarray(con.execute("SELECT run_no FROM step_instances ORDER BY inst").fetchnumpy()["run_no"])
    return req, run_no


def compute(
    seg: dict[str, np.ndarray], req: dict[str, np.ndarray], run_no: np.ndarray
) -> dict[str, dict[str, np.ndarray]]:
    """The columns of build()'s views from segments_of() and requests_of() (numpy only: no connection, so another
    thread's). `req` is emptied once the spans are found, while DuckDB works beside."""
    import numpy as np

    sp = spans(seg, req)
    req.clear()
    rank = _rank_longest_first(seg["gap_ns"])
    itl = pooled_itl(seg, itl_weights(seg, sp), rank, run_no)
    values = tbt(seg, sp, rank)
    has = ~np.isnan(values)
    return {
        "step_segments": {
            "inst": seg["inst"],
            "row_no": np.arange(len(seg["t_ns"])),
            "t_ns": seg["t_ns"],
            "end_ns": seg["end_ns"],
            "n_steps": seg["n_steps"],
        },
        "step_spans": {k: sp[k] for k in ("inst", "req_id", "s_ns", "e_ns", "lo", "hi")},
        "step_itl": itl,
        "step_tbt": {"inst": sp["inst"][has], "req_id": sp["req_id"][has], "tbt_ns": values[has]},
    }


def store(con: duckdb.DuckDBPyConnection, views: dict[str, dict[str, np.ndarray]]) -> None:
    """compute()'s columns as build()'s temp views on `con` (needs fetch()'s step_instances)."""
    for name, columns in views.items():
        _store(con, name, columns)


def _store(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, np.ndarray]) -> None:
    """A temp view over numpy columns (registered without a copy), `inst` replaced by the run and instance names
    (step_itl's rows are per run: the run's only)."""
    import pyarrow as pa

    con.register(f"{name}_arrays", pa.Table.from_arrays([_arrow(v) for v in columns.values()], list(columns)))
    names = "i.run" if name == "step_itl" else "i.run, i.instance"
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {names}, a.* EXCLUDE (inst) "
        f"FROM {name}_arrays a JOIN step_instances i USING (inst)"
    )


def _arrow(a: np.ndarray) -> pa.Array:
    """A numeric numpy array as an Arrow array over the same memory (pa.array would import pandas)."""
    import numpy as np
    import pyarrow as pa

    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])
