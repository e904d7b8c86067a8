"""Tables the build makes from Python rows (the reference tables, build_inputs, data_dictionary): each
declared in the field dictionary, created with its DDL from there and filled through one Arrow table of
its schema."""

import duckdb
import pyarrow

from schemas import arrow_schema, ddl


def arrow_rows(table: str, rows: list[tuple]) -> pyarrow.Table:
    """Python rows, each with every column of a declared table in order, as an Arrow table of its schema."""
    schema = arrow_schema(table)
    columns = list(zip(*rows)) or [()] * len(schema)
    return pyarrow.Table.from_arrays([pyarrow.array(values, field.type) for values, field in zip(columns, schema)],
                                     schema=schema)


def create_table(connection: duckdb.DuckDBPyConnection, table: str, rows: list[tuple] | pyarrow.Table) -> None:
    """Create a declared table (its DDL from the field dictionary) and insert its rows, through one Arrow
    table: executemany inserts row by row (0.4 s for 500 rows here)."""
    connection.execute(f"create or replace table {table} ({ddl(table)})")
    insert_rows(connection, table, rows)


def insert_rows(connection: duckdb.DuckDBPyConnection, table: str, rows: list[tuple] | pyarrow.Table) -> None:
    arrow = rows if isinstance(rows, pyarrow.Table) else arrow_rows(table, rows)
    if arrow.num_rows:
        connection.from_arrow(arrow).insert_into(table)
