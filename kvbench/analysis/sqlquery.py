"""`kvbench sql`: a user's DuckDB query over one or several runs, printed as a table, CSV or JSON."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.analysis.runset import open_runs
from kvbench.analysis.slo import parse_slo
from kvbench.analysis.tables import prepare
from kvbench.config import ConfigError

if TYPE_CHECKING:
    import pandas


def run_query(
    runs: Sequence[str | Path], query: str, fmt: str = "table", slo: str | None = None, limit: int = 100
) -> None:
    """Open the runs (views events, requests, steps, server_metrics; table per_request) and print the query."""
    import duckdb

    con = open_runs(runs)
    try:
        if re.search(
            r"\b(per_request(_base)?|request_events|event_gaps|tier_hits|token_gaps|tbt|step_\w+)\b", query, re.I
        ):  # built only when asked for
            prepare(con, parse_slo(slo) if slo else None)
        try:
            df = con.execute(query).df()
        except duckdb.Error as e:
            raise ConfigError(f"query failed: {str(e).splitlines()[0]}") from None
    finally:
        con.close()
    if fmt == "csv":
        df.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        sys.stdout.write(df.to_json(orient="records", lines=False) + "\n")
    else:
        _print_table(df, limit)


def _cell(v: object) -> str:
    """A table cell: empty for SQL NULL, which pandas hands over as None, NaN, NaT or pd.NA (whose truth value
    raises, so no `v != v`); lists and arrays (DuckDB LIST columns) as their text."""
    import pandas as pd

    return "" if pd.api.types.is_scalar(v) and pd.isna(v) else str(v)


def _print_table(df: pandas.DataFrame, limit: int) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table()
    for col in df.columns:
        t.add_column(str(col), justify="right" if df[col].dtype.kind in "iuf" else "left")
    for row in df.head(limit).itertuples(index=False):
        t.add_row(*(_cell(v) for v in row))
    console = Console()
    console.print(t)
    if len(df) > limit:
        console.print(f"{len(df) - limit:,} more rows (use --csv or --json for all, or --limit N)")
