"""What each object of the database is, said where a reader of the database sees it: every table, view
and column commented from the field dictionary and the sql/ headers (DuckDB's COMMENT ON, which
DESCRIBE and BI tools show), the data_dictionary table listing every column with its unit and where it
comes from, and every object's declared key."""

import duckdb

from pipeline.database import has_table
from pipeline.declared_tables import create_table, insert_rows
from pipeline.errors import PipelineError
from pipeline.paths import PROJECT_ROOT
from pipeline.sql_objects import Key, sql_path, view_description, view_files, view_key
from pipeline.stored_tables import FITTED, STORED, fitted_code
from schemas import TABLE_NAMES, dictionary


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def declared_keys() -> dict[str, Key]:
    """Every declared key, by object: each keyed table's in the field dictionary (the columns that may be
    null: those it declares nullable; a stored table's, those its macro's header names) and each view's
    and table macro's in its header."""
    keys = {}
    for table, entry in dictionary.entries().tables.items():  # an empty key: at most one row
        nullable = (view_key(STORED[table][0]).nullable if entry.kind == "stored" else
                    tuple(name for name in entry.key if entry.columns[name].may_be_null()))
        keys[table] = Key(tuple(entry.key), nullable)
    return keys | {name: key for name in view_files() if (key := view_key(name)) is not None}


def _column_source(table: str, column: str) -> str:
    """Where a column comes from: an upstream JSON key, the pipeline, or the view that computes it."""
    if table in FITTED:
        return f"{fitted_code(table).relative_to(PROJECT_ROOT).as_posix()} over {sql_path(STORED[table][0])}"
    if table in STORED:
        return sql_path(STORED[table][0])
    if table in view_files():
        return sql_path(table)
    source = dictionary.table_entry(table).source
    if table not in TABLE_NAMES:
        return source
    json_path = dictionary.json_paths(table).get(column)
    return "pipeline (ingest)" if json_path is None else f"{source}.{'.'.join(json_path)}"


def _table_macro_columns(connection: duckdb.DuckDBPyConnection) -> list[tuple[str, int, str, str]]:
    """Each table macro's result columns as (macro, position, column, type): what DESCRIBE binds for a
    call with null arguments (binding runs none of the macro's checks). A macro's trailing parameters may
    have defaults, so the call gives as many as bind, from all of them down. A database that holds
    data_dictionary was made by this code (a catalogue, or a copy of the published database), whose
    macros are these: their rows there are read instead (binding every macro costs 80 ms)."""
    if has_table(connection, "data_dictionary"):
        return connection.execute("select object_name, position, column_name, data_type from data_dictionary"
                                  " where kind = 'table macro' order by object_name, position").fetchall()
    columns = []
    for name, parameters in connection.execute(
        "select function_name, parameters from duckdb_functions() where function_type = 'table_macro'"
        " and schema_name = 'main' and not internal order by function_name"
    ).fetchall():
        for count in range(len(parameters), -1, -1):
            try:
                described = connection.execute(
                    f"describe select * from {name}({', '.join(['null'] * count)})").fetchall()
            except duckdb.BinderException:
                continue
            columns += [(name, position, column, data_type)
                        for position, (column, data_type, *_) in enumerate(described)]
            break
        else:
            raise PipelineError(f"{sql_path(name)}: its result columns cannot be described (no call binds)")
    return columns


def describe_objects(connection: duckdb.DuckDBPyConnection) -> None:
    """Give every table, view and column its comment from the field dictionary (writing those that differ
    from the comment it has) and fill data_dictionary, with the table macros' result columns too. A column
    with no dictionary entry fails the build: nothing reaches a reader undocumented."""
    macro_columns = _table_macro_columns(connection)
    # Created empty first, so that it lists itself; a catalogue's or a copied database's is kept while it
    # holds the rows it would be given.
    held = (connection.execute("select * from data_dictionary").fetchall()
            if has_table(connection, "data_dictionary") else None)
    if held is None:
        create_table(connection, "data_dictionary", [])
    catalog = connection.execute(
        "select table_name, 'table', comment from duckdb_tables() where schema_name = 'main' and not internal"
        " union all select view_name, 'view', comment from duckdb_views() where schema_name = 'main' and not internal"
    ).fetchall()
    objects = {name: kind for name, kind, _ in catalog}
    descriptions = {name: view_description(name) if name in view_files() else dictionary.table_description(name)
                    for name, kind in objects.items()}
    # (what a comment goes on, its text, the comment it has now)
    comments = [(f"{kind} {name}", descriptions[name], now) for name, kind, now in catalog]
    rows, missing = [], []
    for name, column, position, data_type, now in connection.execute(
        "select table_name, column_name, column_index, data_type, comment from duckdb_columns()"
        " where schema_name = 'main' and not internal order by table_name, column_index"
    ).fetchall():
        try:
            entry = dictionary.column(name, column)
        except KeyError as error:
            missing.append(str(error).strip("'\""))
            continue
        comments.append((f"column {name}.{column}", entry.description, now))
        rows.append((name, objects[name], descriptions[name], column, position, data_type, entry.unit,
                     entry.description, _column_source(name, column)))
    for name, position, column, data_type in macro_columns:
        try:
            entry = dictionary.column(name, column)
        except KeyError as error:
            missing.append(str(error).strip("'\""))
            continue
        rows.append((name, "table macro", view_description(name), column, position, data_type, entry.unit,
                     entry.description, _column_source(name, column)))
    if missing:
        raise PipelineError("columns missing from the field dictionary (schemas/dictionary.toml)", missing)
    # Only the comments that differ from those present: a copy of a database this code built keeps its
    # views' and ingested tables' (create_views leaves its views alone), and each statement costs DuckDB
    # about 0.3 ms (a full build writes 1,070, 0.3-0.4 s; a refresh that appends, 192). One transaction:
    # committed one by one, the comments took twice as long.
    statements = [f"comment on {target} is {_sql_literal(text)};" for target, text, now in comments if text != now]
    connection.execute("\n".join(["begin;", *statements, "commit;"]))
    if held != rows:
        connection.execute("delete from data_dictionary")
        insert_rows(connection, "data_dictionary", rows)
