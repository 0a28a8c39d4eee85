"""The SQL files under analysis/sql: their text by name, and their results as rows read by column name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

SQL_DIR = Path(__file__).with_name("sql")


def sql_text(name: str) -> str:
    """The text of kvbench/analysis/sql/<name>.sql (formulas in its header comment)."""
    return (SQL_DIR / f"{name}.sql").read_text()


def subquery(name: str) -> str:
    """A SELECT file's text without its final semicolon, to nest in another query."""
    return sql_text(name).rstrip().rstrip(";")


def parameters(text: str) -> set[str]:
    """The $names a query binds (comments left out)."""
    return set(re.findall(r"\$([A-Za-z_]\w*)", re.sub(r"--[^\n]*", "", text)))


def execute(
    con: duckdb.DuckDBPyConnection, name: str, values: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Run <name>.sql with its $parameters bound from `values` (those it names; a missing one is an error)."""
    text = sql_text(name)
    wanted = parameters(text)
    return con.execute(text, {k: v for k, v in (values or {}).items() if k in wanted} if wanted else None)


def records(con: duckdb.DuckDBPyConnection, name: str, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows of <name>.sql as {column: value}."""
    cur = execute(con, name, values)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]
