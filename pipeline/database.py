"""Reading query results as dictionaries, for the steps that format what the views compute."""

from typing import Any

import duckdb


def fetch_dicts(connection: duckdb.DuckDBPyConnection, sql: str, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    cursor = connection.execute(sql, parameters)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, values)) for values in cursor.fetchall()]
