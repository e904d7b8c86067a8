"""Connections to DuckDB as every step opens them, and query results as dictionaries for the steps
that format what the views compute."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

def connect(database: str | Path = ":memory:", *, read_only: bool = False,
            config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, without DuckDB's progress bar: it draws one for any query over two seconds, into
    logs and cron mail as well, and the steps report their own progress (pipeline/progress.py)."""
    connection = duckdb.connect(str(database), read_only=read_only, config=config or {})
    connection.execute("set enable_progress_bar = false")
    return connection


def has_table(connection: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the database holds table `name` (a catalogue or a copy of the published database does)."""
    return connection.execute("select count(*) from duckdb_tables() where schema_name = 'main' and table_name = ?",
                              [name]).fetchone()[0] > 0


def fetch_dicts(connection: duckdb.DuckDBPyConnection, sql: str, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return list(stream_dicts(connection, sql, parameters))


def stream_dicts(
    connection: duckdb.DuckDBPyConnection, sql: str, parameters: dict[str, Any], batch_rows: int = 20_000
) -> Iterator[dict[str, Any]]:
    """fetch_dicts a batch at a time, for results too large to hold as dictionaries at once. The
    connection runs nothing else until the iterator is exhausted."""
    cursor = connection.execute(sql, parameters)
    names = [column[0] for column in cursor.description]
    while batch := cursor.fetchmany(batch_rows):
        yield from (dict(zip(names, values)) for values in batch)
