"""Analysis: the event log's figures as SQL (DuckDB) and pure functions of SQL output."""
