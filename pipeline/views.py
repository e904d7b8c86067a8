"""The views and macros of sql/ created on a database, each after what it reads: the order DuckDB's own
parser finds in the SQL, never listed by hand. The stored tables (pipeline/stored_tables.py) take their
place in that order, each after its macro."""

import contextlib
import re
from collections.abc import Callable, Collection
from graphlib import CycleError, TopologicalSorter

import duckdb
import msgspec

from pipeline.database import has_table
from pipeline.errors import PipelineError
from pipeline.sql_objects import is_stored, sql_object, sql_path, view_files
from pipeline.stored_tables import FITTED, STORED

# A table or function a statement reads, in json_serialize_sql's text (a name in a string literal is
# escaped there, so it cannot match).
REFERENCE = re.compile(r'"(?:table_name|function_name)":"(\w+)"')


def views_in_dependency_order(connection: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """The sql/ objects and the stored tables (STORED), each after the tables, views and macros its SQL
    reads (a stored table after its macro and snapshot_history). DuckDB's own parser finds them: its
    json_serialize_sql gives the parsed statement, whose table and function references name what it
    reads (a common table expression named like an object only adds an edge). Measured: 20 ms, where
    importing and running sqlglot took 170 ms of every build. Parsed on `connection` when given (the
    build's: opening an in-memory database of its own costs another 20 ms)."""
    known = view_files().keys() | STORED.keys()
    graph = {table: {macro, "snapshot_history"} for table, (macro, _) in STORED.items()}
    objects = {name: sql_object(name) for name in view_files()}
    queries = [obj.body if obj.kind != "macro" else f"select {obj.body}" for obj in objects.values()]
    with contextlib.nullcontext(connection) if connection is not None else duckdb.connect() as parser:
        parsed = parser.execute("select json_serialize_sql(unnest($queries))", {"queries": queries}).fetchall()
    for name, (tree,) in zip(objects, parsed):
        if '"error":true' in tree:
            raise PipelineError(f"{sql_path(name)}: {msgspec.json.decode(tree)['error_message'].splitlines()[0]}")
        graph[name] = set(REFERENCE.findall(tree)) & known - {name}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise PipelineError(f"sql/: views depend on each other in a cycle: {' -> '.join(error.args[1])}") from None


def create_views(connection: duckdb.DuckDBPyConnection, store: Callable[[str], None] | None = None,
                 present: Collection[str] = ()) -> None:
    """Create every view and macro in sql/ on `connection`, each after what it reads, but those `present`
    (a copy of a database this code built holds them as this code makes them); a stored table is made by
    `store` when its turn comes (without one, as a view over its macro, for tests)."""
    for name in views_in_dependency_order(connection):
        if name in STORED:
            if store is not None:
                store(name)
            elif name in FITTED:
                fitted = FITTED[name](connection.sql(f"select * from {STORED[name][0]}(null)").to_arrow_table())
                connection.execute(f"create or replace table {name} as select * from fitted")
            elif STORED[name][1] == "snapshot":
                connection.execute(f"create or replace view {name} as select * from {STORED[name][0]}(null)")
            continue
        if name in present and not is_stored(name):
            continue
        try:
            if is_stored(name):
                store_view_rows(connection, name)
            else:
                connection.execute(sql_object(name).statement)
        except duckdb.Error as error:
            raise PipelineError(f"{sql_path(name)}: {error}") from None


def store_view_rows(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    """A stored view's rows as its table: made, or, where a catalogue or a copy of the published database
    holds it, emptied and filled (its descriptions kept)."""
    if has_table(connection, name):
        connection.execute(f"delete from {name}; insert into {name} {sql_object(name).body}")
    else:
        connection.execute(f"create table {name} as {sql_object(name).body}")
