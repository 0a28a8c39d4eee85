"""The temp tables every figure reads, built once per connection: per_request and the token gaps, kv_transfers."""

from __future__ import annotations

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
    row = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [name]).fetchone()
    return bool(row and row[0])


def prepare(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> None:
    """Build the temp tables request_events, event_gaps, tier_hits, step_* (stepgaps.py), tbt and the view token_gaps (once)
    and the table per_request (again when the SLO changes). A connection with a cache (cache.enable) views
    FIGURE_INPUTS from there when it has them for this SLO, and stores them there when it had to build them."""
    slo = slo or Slo()
    key = repr(slo)
    if has_table(con, "kvbench_slo"):
        row = con.execute("SELECT key FROM kvbench_slo").fetchone()
        if row and row[0] == key:
            return
    if has_table(con, "tbt") or not cache.load(con, FIGURE_INPUTS, key):
        _build(con, slo)
        cache.save(con, FIGURE_INPUTS, key)
    con.execute("CREATE OR REPLACE TEMP TABLE kvbench_slo AS SELECT ?::VARCHAR AS key", [key])


def _build(con: duckdb.DuckDBPyConnection, slo: Slo) -> None:
    """The derived tables (once per connection) and per_request for `slo`."""
    if not has_table(con, "tbt"):
        cache.drop(con, FIGURE_INPUTS)  # views over another SLO's cached files
        con.execute(sql_text("request_events"))
        con.execute(sql_text("event_gaps"))
        con.execute(sql_text("tier_hits"))
        stepgaps.build(con)
        con.execute(sql_text("token_gaps"))
        con.execute(sql_text("tbt"))
    cache.drop(con, ["per_request"])
    con.execute(sql_text("per_request"), slo.params())


def build_kv_transfers(con: duckdb.DuckDBPyConnection) -> None:
    """The temp table kv_transfers (one row per transfer, kv_transfers.sql), once; needs per_request."""
    if not (has_table(con, "kv_transfers") or cache.load(con, ["kv_transfers"])):
        con.execute("DROP VIEW IF EXISTS kv_transfers")  # left by kv_transfers_view
        con.execute(f"CREATE TEMP TABLE kv_transfers AS {subquery('kv_transfers')}")
        cache.save(con, ["kv_transfers"])


def kv_transfers_view(con: duckdb.DuckDBPyConnection) -> None:
    """kv_transfers as a temp view, unless the table is built: a reader that scans it once (the summary's totals)
    streams it instead of holding a row per transfer (a million for a million-request run). With a cache, the
    rows are written there once and read back."""
    if has_table(con, "kv_transfers") or cache.load(con, ["kv_transfers"]):
        return
    con.execute(f"CREATE OR REPLACE TEMP VIEW kv_transfers AS {subquery('kv_transfers')}")
    cache.save(con, ["kv_transfers"])
