"""The temp tables every figure reads, built once per connection: per_request and the token gaps, kv_transfers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.analysis import stepgaps
from kvbench.analysis.slo import Slo
from kvbench.analysis.sqlfiles import sql_text, subquery

if TYPE_CHECKING:
    import duckdb


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the connection holds the temp table `name`."""
    row = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [name]).fetchone()
    return bool(row and row[0])


def prepare(con: duckdb.DuckDBPyConnection, slo: Slo | None = None) -> None:
    """Build the temp tables request_events, event_gaps, step_* (stepgaps.py), tbt and the view token_gaps (once)
    and the table per_request (again when the SLO changes)."""
    slo = slo or Slo()
    if not has_table(con, "tbt"):
        con.execute(sql_text("request_events"))
        con.execute(sql_text("event_gaps"))
        stepgaps.build(con)
        con.execute(sql_text("token_gaps"))
        con.execute(sql_text("tbt"))
    key = repr(slo)
    if has_table(con, "per_request") and has_table(con, "kvbench_slo"):
        row = con.execute("SELECT key FROM kvbench_slo").fetchone()
        if row and row[0] == key:
            return
    con.execute(sql_text("per_request"), slo.params())
    con.execute("CREATE OR REPLACE TEMP TABLE kvbench_slo AS SELECT ?::VARCHAR AS key", [key])


def build_kv_transfers(con: duckdb.DuckDBPyConnection) -> None:
    """The temp table kv_transfers (one row per transfer, kv_transfers.sql), once; needs per_request."""
    if not has_table(con, "kv_transfers"):
        con.execute("DROP VIEW IF EXISTS kv_transfers")  # left by kv_transfers_view
        con.execute(f"CREATE TEMP TABLE kv_transfers AS {subquery('kv_transfers')}")


def kv_transfers_view(con: duckdb.DuckDBPyConnection) -> None:
    """kv_transfers as a temp view, unless the table is built: a reader that scans it once (the summary's totals)
    streams it instead of holding a row per transfer (a million for a million-request run)."""
    if not has_table(con, "kv_transfers"):
        con.execute(f"CREATE OR REPLACE TEMP VIEW kv_transfers AS {subquery('kv_transfers')}")
