"""The temp tables every figure reads, built once per connection: per_request and the token gaps, kv_transfers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from kvbench.analysis import cache, stepgaps
from kvbench.analysis.slo import Slo
from kvbench.analysis.sqlfiles import sql_text, subquery

if TYPE_CHECKING:
    import duckdb


# what the figures read besides the log and per_request: a connection served from the run's cache (cache.py) holds
# these and per_request only, not the tables they were derived from
FIGURE_INPUTS = ("per_request", "event_gaps", "step_itl", "tier_hits")


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the connection holds the temp table `name`."""
    rows = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [name]).fetchall()
    return bool(rows[0][0])  # fetchall: a result left unfinished would refuse the connection to con.register


def prepare(con: duckdb.DuckDBPyConnection, slo: Slo | None = None, transfers: bool = False) -> None:
    """Build the temp tables request_events, event_gaps, tier_hits, step_* (stepgaps.py), tbt, per_request_base and
    the view token_gaps (once) and the table per_request (again when the SLO changes). A connection with a cache
    (cache.enable) views FIGURE_INPUTS from there when it has them for this SLO, and stores them there when it had to build them.
    transfers: also kv_transfers as kv_transfers_view makes it, paired while the step gaps are computed."""
    slo = slo or Slo()
    key = repr(slo)
    rows = con.execute("SELECT key FROM kvbench_slo").fetchall() if has_table(con, "kvbench_slo") else []
    if not (rows and rows[0][0] == key):
        if has_table(con, "tbt") or not cache.load(con, FIGURE_INPUTS, key):
            _build(con, slo, transfers)
        con.execute("CREATE OR REPLACE TEMP TABLE kvbench_slo AS SELECT ?::VARCHAR AS key", [key])
    if transfers:
        kv_transfers_view(con)


def side_connection(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> duckdb.DuckDBPyConnection | None:
    """After prepare(con, slo): a second connection to con's database, prepared alike from the same cache files, so
    that figure queries can run on another thread beside con's; None when con's tables are not all in its cache
    (then they are con's own temp tables)."""
    key = repr(slo or Slo())
    cur = cache.cursor(con, FIGURE_INPUTS, key)
    if cur is not None:
        cur.execute("CREATE OR REPLACE TEMP TABLE kvbench_slo AS SELECT ?::VARCHAR AS key", [key])
    return cur


def _build(con: duckdb.DuckDBPyConnection, slo: Slo, transfers: bool) -> None:
    """The derived tables (once per connection) and per_request for `slo`, each stored in the cache if it has one.
    The step gaps are numpy work on a thread of their own (from the steps rows it reads on a second connection),
    while this connection derives the rest, per_request's columns but the TBT and the SLO's included
    (per_request_base)."""
    key = repr(slo)
    if not has_table(con, "tbt"):
        cache.drop(con, FIGURE_INPUTS)  # views over another SLO's cached files
        side = con.cursor()  # the steps rows read and merged on a second connection while this one pivots
        try:
            with ThreadPoolExecutor(1) as pool:
                seg = pool.submit(stepgaps.segments_of, side)
                _request_events(con)
                req = stepgaps.requests_of(con)
                gaps = pool.submit(lambda: stepgaps.compute(seg.result(), *req))  # after seg: one worker
                con.execute(sql_text("event_gaps"))
                con.execute(sql_text("tier_hits"))
                if transfers:
                    kv_transfers_view(con)
                con.execute(sql_text("per_request_base"))
                stepgaps.store(con, gaps.result())
        finally:
            side.close()
        con.execute(sql_text("token_gaps"))
        con.execute(sql_text("tbt"))
    cache.drop(con, ["per_request"])
    # with a cache, per_request goes straight to its file: a temp table of it would be written (and spilled) once more
    per_request = (subquery("per_request"), slo.params())
    if not cache.save(con, FIGURE_INPUTS, key, {"per_request": per_request}):
        con.execute(f"CREATE OR REPLACE TEMP TABLE per_request AS {per_request[0]}", per_request[1])


def build_kv_transfers(con: duckdb.DuckDBPyConnection) -> None:
    """The temp table kv_transfers (one row per transfer, kv_transfers.sql), once."""
    if not (has_table(con, "kv_transfers") or cache.load(con, ["kv_transfers"])):
        con.execute("DROP VIEW IF EXISTS kv_transfers")  # left by kv_transfers_view
        _request_events(con)
        _kv_events(con)
        con.execute(f"CREATE TEMP TABLE kv_transfers AS {_kv_transfers(con)}")
        cache.save(con, ["kv_transfers"])


def kv_transfers_view(con: duckdb.DuckDBPyConnection) -> None:
    """kv_transfers as a temp view, unless the table is built: a reader that scans it once (the summary's totals)
    streams it instead of holding a row per transfer (a million for a million-request run). With a cache, the
    rows are written there once and read back."""
    if has_table(con, "kv_transfers") or cache.load(con, ["kv_transfers"]):
        return
    _request_events(con)
    _kv_events(con)
    con.execute(f"CREATE OR REPLACE TEMP VIEW kv_transfers AS {_kv_transfers(con)}")
    cache.save(con, ["kv_transfers"])


def _request_events(con: duckdb.DuckDBPyConnection) -> None:
    """The temp table request_events, unless the connection has it (one served from the cache has not: then
    kv_transfers, which reads it, pays for the pivot): merged from the per-request parts where open_runs found
    them for every run (the view request_parts), else pivoted from the events."""
    if not has_table(con, "request_events"):
        con.execute(sql_text("request_parts" if _merged(con) else "request_events"))


def _kv_events(con: duckdb.DuckDBPyConnection) -> None:
    """kv_events, the events whose KV transfers kv_transfers.sql pairs: with request_events merged from the
    per-request parts, a table of those of requests with several transfers (kv_events.sql), else a view of all."""
    if not has_table(con, "kv_events"):
        if _merged(con):
            con.execute(sql_text("kv_events"))
        else:
            con.execute("CREATE OR REPLACE TEMP VIEW kv_events AS SELECT * FROM events")


def _merged(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection has the view request_parts (runset.open_runs)."""
    rows = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'request_parts'").fetchall()
    return bool(rows[0][0])


def _kv_transfers(con: duckdb.DuckDBPyConnection) -> str:
    """The query of kv_transfers: pairing kv_events, and the single transfers from merged request_events."""
    paired = subquery("kv_transfers")
    return (
        f"SELECT * FROM ({paired}) UNION ALL BY NAME SELECT * FROM ({subquery('kv_singles')})"
        if _merged(con)
        else paired
    )
