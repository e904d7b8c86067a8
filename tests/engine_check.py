"""Run inside another DuckDB engine's environment (tests/test_clients.py starts it): open each database
read-only, select from every table and view, run each query; print one JSON document of the outcome.

Usage: python engine_check.py QUERIES.json DATABASE...
"""

import json
import sys

import duckdb


def check(database: str, queries: list[str]) -> dict:
    failures, rows = [], {}
    connection = duckdb.connect(database, read_only=True)
    objects = [name for (name,) in connection.execute(
        "select table_name from duckdb_tables() where schema_name = 'main' and not internal"
        " union all select view_name from duckdb_views() where schema_name = 'main' and not internal"
        " order by 1"
    ).fetchall()]
    for name in objects:
        # Every column of every row is computed (the count over all rows needs them all), in one query:
        # a count(*) alone lets the engine skip columns, and a select * with a limit skip rows.
        sql = f'select *, count(*) over () from "{name}" limit 100'
        try:
            connection.execute(sql).fetchall()
        except duckdb.Error as error:
            failures.append({"object": name, "sql": sql, "error": str(error).splitlines()[0]})
    for number, sql in enumerate(queries):
        try:
            rows[number] = len(connection.execute(sql).fetchall())
        except duckdb.Error as error:
            failures.append({"object": f"documented query {number + 1}", "sql": sql, "error": str(error).splitlines()[0]})
    return {"objects": objects, "failures": failures, "query_rows": rows}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        queries = json.load(handle)
    print(json.dumps({
        "version": duckdb.__version__,
        "databases": {database: check(database, queries) for database in sys.argv[2:]},
    }))
