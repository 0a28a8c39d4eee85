"""Derived analysis tables of a large run cached as Parquet under RUN/.cache, keyed by the log parts they came from.

Pivoting a million-request log into per-request rows (request_events, per_request), token gaps and KV transfers
is most of what a summary of it costs, and the log does not change once written: the first reader stores those
tables and later readers view them. A file's name holds a hash of everything its content depends on (every
Parquet part's path, size and mtime, run.json, this package's SQL and step-gap code, the DuckDB version, and for
per_request the SLO), so a rewritten log or a newer kvbench finds no match and derives again. Small logs are
derived each time: the cache would cost more disk than it saves time. A cache that cannot be written (read-only
run directory, disk full) is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.eventlog import TABLES, table_parts

if TYPE_CHECKING:
    import duckdb

CACHE_DIR = ".cache"
FORMAT = 2  # bump when a cached table's meaning or encoding changes without its SQL changing
# lz4: written and read back faster than zstd (the figures read per_request several times), at 1.5x the bytes
COMPRESSION = "lz4"
MIN_LOG_BYTES = 8 << 20  # event log size from which a run's derived tables are cached (~60,000 requests)
_VARIABLE = "kvbench_cache_key"  # the connection's cache: "<directory>\n<key>", or unset


def signature(run_dir: Path, min_log_bytes: int = MIN_LOG_BYTES) -> str | None:
    """The hash naming a run's cached tables; None when its event log is smaller than min_log_bytes."""
    import duckdb

    h = hashlib.sha256(f"{FORMAT} {duckdb.__version__}".encode())
    log_bytes = 0
    for table in TABLES:
        for part in table_parts(run_dir, table):
            st = os.stat(part)
            log_bytes += st.st_size if table == "events" else 0
            h.update(f"{Path(part).relative_to(run_dir)} {st.st_size} {st.st_mtime_ns}\n".encode())
    if log_bytes < min_log_bytes:
        return None
    h.update((run_dir / "run.json").read_bytes())
    code = Path(__file__).parent
    for path in sorted([*code.glob("sql/*.sql"), code / "stepgaps.py", code / "tables.py", Path(__file__)]):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:24]


def enable(con: duckdb.DuckDBPyConnection, run_dir: Path, min_log_bytes: int = MIN_LOG_BYTES) -> None:
    """Let `con` (open on run_dir alone) read and write run_dir's cache; a no-op for a log under min_log_bytes."""
    key = signature(run_dir, min_log_bytes)
    if key is not None:
        con.execute(f"SET VARIABLE {_VARIABLE} = ?", [f"{run_dir / CACHE_DIR}\n{key}"])


def _where(con: duckdb.DuckDBPyConnection) -> tuple[Path, str] | None:
    rows = con.execute(f"SELECT getvariable('{_VARIABLE}')").fetchall()  # not fetchone: see tables.has_table
    if not rows[0][0]:
        return None
    folder, key = str(rows[0][0]).split("\n")
    return Path(folder), key


def _file(folder: Path, name: str, key: str, tag: str) -> Path:
    suffix = f"{key}-{hashlib.sha256(tag.encode()).hexdigest()[:16]}" if tag else key
    return folder / f"{name}-{suffix}.parquet"


def load(con: duckdb.DuckDBPyConnection, names: Sequence[str], tag: str = "") -> bool:
    """View each of `names` over its cached file (tag: what else its content depends on, e.g. the SLO) and
    return True, or return False and change nothing when the connection has no cache or a file is missing."""
    where = _where(con)
    if where is None:
        return False
    files = [_file(where[0], n, where[1], tag) for n in names]
    if not all(f.is_file() for f in files):
        return False
    drop(con, names)
    for name, f in zip(names, files):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM read_parquet('{_quoted(f)}')")
    return True


def cursor(con: duckdb.DuckDBPyConnection, names: Sequence[str], tag: str = "") -> duckdb.DuckDBPyConnection | None:
    """A second connection to con's database with con's cache, viewing `names` over their cached files (temp tables
    and views are a connection's own), for queries on another thread; None when con has no cache or a file is
    missing."""
    where = _where(con)
    if where is None:
        return None
    cur = con.cursor()
    cur.execute(f"SET VARIABLE {_VARIABLE} = ?", [f"{where[0]}\n{where[1]}"])
    if not load(cur, names, tag):
        cur.close()
        return None
    return cur


def drop(con: duckdb.DuckDBPyConnection, names: Sequence[str]) -> None:
    """Drop the temp tables or views `names` where they exist."""
    kinds = con.execute(
        "SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE temporary "
        "UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() WHERE temporary"
    ).fetchall()
    for name, kind in kinds:
        if name in names:
            con.execute(f"DROP {kind} {name}")


def save(
    con: duckdb.DuckDBPyConnection,
    names: Sequence[str],
    tag: str = "",
    queries: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
) -> bool:
    """Write each of `names` (tables or views on `con`) to the cache, then view it from there, and return True;
    False when the connection has no cache or a write fails, leaving the tables as they were. A name in `queries`
    is no table: its rows are those of the query (SELECT text, bound values), written straight to its file, so the
    caller makes the table itself when this returns False. Files of other keys (an older log) for these names are
    removed; other tags of this key (another SLO) are kept, so concurrent summaries never delete each other's."""
    queries = queries or {}
    if _where(con) is not None and all(_write(con, name, tag, queries.get(name)) for name in names):
        return load(con, names, tag)
    return False


def _write(con: duckdb.DuckDBPyConnection, name: str, tag: str, query: tuple[str, Mapping[str, Any]] | None) -> bool:
    """COPY one table's rows (or those of `query`) to its cache file (atomically, through a temp file), dropping an
    older log's files of `name`; False when the write fails. Row order is not kept: a parallel write, and nothing
    reads the rows in file order."""
    import duckdb

    where = _where(con)
    assert where is not None
    folder, key = where
    f = _file(folder, name, key, tag)
    tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")
    select, values = query or (f"SELECT * FROM {name}", None)
    try:
        folder.mkdir(exist_ok=True)
        con.execute("SET preserve_insertion_order = false")
        try:
            con.execute(
                f"COPY ({select}) TO '{_quoted(tmp)}' (FORMAT parquet, COMPRESSION {COMPRESSION})", values or None
            )
        finally:
            con.execute("RESET preserve_insertion_order")
        os.replace(tmp, f)
        for old in folder.glob(f"{name}-*.parquet"):
            if not old.name.startswith(f"{name}-{key}"):  # an older log's
                old.unlink(missing_ok=True)
    except (OSError, duckdb.Error):  # the tables stay as built: a cache is never a reason to fail
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
