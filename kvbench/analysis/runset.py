"""Opening run directories for SQL: validate run.json and every Parquet part, then expose them as DuckDB views."""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench import requestparts
from kvbench.config import ConfigError
from kvbench.eventlog import SCHEMA_VERSION, TABLES, table_parts

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

_DUCK_TYPES = {"int64": "BIGINT", "int32": "INTEGER", "string": "VARCHAR", "double": "DOUBLE"}


def expand(runs: Sequence[str | Path]) -> list[Path]:
    """Run directories named by paths or globs (a glob that matches nothing is an error)."""
    out: list[Path] = []
    for item in runs:
        text = str(item)
        if not Path(text).exists() and any(c in text for c in "*?["):
            # a pattern like reports/* also matches folders that are not runs (baselines/): keep the runs
            matches = sorted(p for p in glob.glob(text) if (Path(p) / "run.json").is_file())
            if not matches:
                raise ConfigError(f"{text}: no run directory (with a run.json) matches this pattern")
            out.extend(Path(p) for p in matches)
        else:
            out.append(Path(text))
    if not out:
        raise ConfigError("no run directory given")
    return out


def check_run(run_dir: Path) -> dict[str, Any]:
    """run.json of a run directory; ConfigError (one line) when it is not a readable kvbench run."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    path = run_dir / "run.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a kvbench run directory (no run.json)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {version!r}, this kvbench reads schema_version {SCHEMA_VERSION}")
    return manifest


def _type_name(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return {"large_string": "string"}.get(str(t), str(t))


def check_parts(run_dir: Path, table: str) -> list[str]:
    """The Parquet parts of one table, each checked to be complete and to have the kvbench columns and types."""
    import pyarrow.parquet as pq

    expected = TABLES[table]
    files = table_parts(run_dir, table)
    for f in files:
        try:
            schema = pq.read_schema(f)
        except Exception as e:  # pyarrow raises several types for truncated / non-Parquet files
            raise ConfigError(
                f"{f}: not a readable Parquet file (truncated or foreign?): {e}".splitlines()[0]
            ) from None
        for field in expected:
            if field.name not in schema.names:
                raise ConfigError(f"{f}: not a kvbench {table} table (no column {field.name!r})")
            got, want = _type_name(schema.field(field.name).type), _type_name(field.type)
            if got != want:
                raise ConfigError(f"{f}: column {field.name!r} has type {got}, expected {want}")
    return files


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _select(table: str, run: str, files: list[str]) -> str:
    cols = ", ".join(f"{f.name}::{_DUCK_TYPES[_type_name(f.type)]} AS {f.name}" for f in TABLES[table])
    source = "read_parquet([" + ", ".join(_quote(f) for f in files) + "])"
    return f"SELECT {_quote(run)} AS run, {cols} FROM {source}"


def _empty_select(table: str) -> str:
    cols = ", ".join(f"NULL::{_DUCK_TYPES[_type_name(f.type)]} AS {f.name}" for f in TABLES[table])
    return f"SELECT NULL::VARCHAR AS run, {cols} WHERE false"


def run_names(dirs: list[Path]) -> list[str]:
    """The `run` column's value per directory: its name, or its path when two runs share a name."""
    names = [d.resolve().name for d in dirs]
    if len(set(names)) == len(names):
        return names
    return [str(d) for d in dirs]


def open_runs(runs: Sequence[str | Path], threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with views events, requests, steps, server_metrics over the runs (column `run`)."""
    import duckdb

    dirs = expand(runs)
    for d in dirs:
        check_run(d)
    names = run_names(dirs)
    if len(set(names)) != len(names):
        raise ConfigError(f"the same run directory is given twice: {', '.join(sorted(set(map(str, dirs))))}")
    con = duckdb.connect(config={"threads": threads} if threads else {})
    for table in TABLES:
        parts = [
            _select(table, name, check_parts(d, table))
            for d, name in zip(dirs, names)
            if (d / table).is_dir() and any((d / table).glob("*.parquet"))
        ]
        body = " UNION ALL ".join(parts) if parts else _empty_select(table)
        con.execute(f"CREATE VIEW {table} AS {body}")
    _request_parts_view(con, dirs, names)
    return con


def request_parts(run_dir: Path) -> list[str] | None:
    """The run's per-request parts (kvbench/requestparts.py), or None unless every events part has one, no other
    is there, and each has their columns: a run written before them, killed between an events part and its
    per-request part, or from elsewhere is pivoted from its events."""
    import pyarrow.parquet as pq

    events = table_parts(run_dir, "events")
    derived = table_parts(run_dir, requestparts.DIR)
    if not events or [Path(p).name for p in events] != [Path(p).name for p in derived]:
        return None
    try:
        if any(not pq.read_schema(f).equals(requestparts.SCHEMA) for f in derived):
            return None
    except Exception:  # pyarrow raises several types for truncated / non-Parquet files
        return None
    return derived


def _request_parts_view(con: duckdb.DuckDBPyConnection, dirs: list[Path], names: list[str]) -> None:
    """The view request_parts over every run's per-request parts, when every run with events has them (then
    analysis/tables.py merges them into request_events instead of pivoting the events)."""
    selects = []
    for d, name in zip(dirs, names):
        if not table_parts(d, "events"):
            continue
        derived = request_parts(d)
        if derived is None:
            return
        selects.append(f"SELECT {_quote(name)} AS run, * FROM read_parquet([{', '.join(map(_quote, derived))}])")
    if selects:
        con.execute(f"CREATE VIEW request_parts AS {' UNION ALL '.join(selects)}")
