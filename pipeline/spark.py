"""The views as Spark SQL over the published Parquet, for when the data outgrow one machine.

sql/ holds DuckDB SQL written with constructs Spark shares. sqlglot translates each view to Spark's
dialect when asked, with the scalar macros inlined (Spark has none; a function registered by hand is
what this spares the user) and CREATE TEMPORARY VIEW, which Spark needs over temporary tables. Each
table a view reads (ingested, stored per snapshot or pair, or a reference table) becomes a temporary
view over its Parquet folder with the columns, in the order, the DuckDB table has. The table macros
(best_configurations_in, configuration_diff, index_diff, energy_at_concurrency, fleet_plan) are DuckDB's
only: the stored tables they fill are read from their Parquet instead, and a view that only they read
(its header says `-- duckdb only:`) is left out.
"""

from pathlib import Path

import sqlglot
from sqlglot import exp

from pipeline.database import connect
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import Paths
from pipeline.sql_objects import is_duckdb_only, sql_object, sql_path, view_description
from pipeline.stored_tables import STORED
from pipeline.views import views_in_dependency_order
from schemas import REFERENCE_TABLES, TABLE_NAMES

# The tables published as Parquet: ingested, stored and reference tables.
PUBLISHED_TABLES = (*TABLE_NAMES, *STORED, *REFERENCE_TABLES)
# Set once for the session, before the views: an older snapshot's files lack columns added since
# (Spark then reads the union of the files' columns, as DuckDB's union_by_name), and a snapshot_id=<id>
# folder name stays text whatever it looks like.
SESSION_SETTINGS = (
    "SET spark.sql.parquet.mergeSchema = true",
    "SET spark.sql.sources.partitionColumnTypeInference.enabled = false",
)
# Every statement ends with this, and no statement holds it: split on it to run one at a time.
STATEMENT_END = ";\n"


# A scalar macro: its parameters and its expression, with the macros it calls inlined.
Macro = tuple[tuple[str, ...], exp.Expression]


def _inline_macros(expression: exp.Expression, macros: dict[str, Macro]) -> exp.Expression:
    """Replace every call of a scalar macro by its body, the parameters by the arguments (DuckDB's
    macros are the same substitution)."""
    atomic = (exp.Column, exp.Literal, exp.Func, exp.Case, exp.Paren, exp.Null, exp.Boolean)

    def grouped(node: exp.Expression) -> exp.Expression:
        return node if isinstance(node, atomic) else exp.Paren(this=node)

    def inline(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Anonymous) and node.name.lower() in macros):
            return node
        parameters, expression = macros[node.name.lower()]
        if len(node.expressions) != len(parameters):
            raise PipelineError(f"{node.sql('duckdb')}: macro {node.name} takes {len(parameters)} arguments")
        arguments = dict(zip(parameters, node.expressions))
        body = expression.copy().transform(
            lambda part: grouped(arguments[part.name].copy())
            if isinstance(part, exp.Column) and not part.table and part.name in arguments else part
        )
        return grouped(body)

    return expression.transform(inline)


def view_statement(name: str, macros: dict[str, Macro]) -> str:
    """One sql/ view as a Spark CREATE OR REPLACE TEMPORARY VIEW statement."""
    try:
        tree = _inline_macros(sqlglot.parse_one(sql_object(name).statement, read="duckdb"), macros)
        tree.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
        return tree.sql(dialect="spark", pretty=True, comments=False, unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.SqlglotError as error:
        raise PipelineError(f"{sql_path(name)}: not translated to Spark SQL: {str(error).splitlines()[0]}") from None


def _quoted(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _table_statement(table: str, columns: list[list[str]], location: str | None) -> str:
    """A table as a temporary view over its Parquet folder, or, with no files (a pair table of a
    one-snapshot build), an empty one with the same columns."""
    if location is None:
        listed = [f"CAST(NULL AS {exp.DataType.build(data_type, dialect='duckdb').sql('spark')}) AS {_quoted(name)}"
                  for name, data_type in columns]
        source = "WHERE FALSE"
    else:
        listed, source = [_quoted(name) for name, _ in columns], f"FROM parquet.{_quoted(location)}"
    return f"CREATE OR REPLACE TEMPORARY VIEW {table} AS\nSELECT\n  " + ",\n  ".join(listed) + f"\n{source}"


def spark_sql(paths: Paths, parquet_root: str | None = None) -> str:
    """The Spark SQL script for the published build in `paths`: the session settings, a temporary
    view per published table over `parquet_root` (default: OUT/parquet), then every view of sql/ in
    dependency order."""
    database = paths.database
    if not database.is_file():
        raise PipelineError(f"{database}: no published build to describe; {NEXT_STEP}")
    root = (parquet_root or str(Path(paths.out).resolve() / "parquet")).rstrip("/")
    with connect(database, read_only=True) as connection:
        columns = dict(connection.execute(
            "select table_name, list([column_name, data_type] order by column_index) from duckdb_columns()"
            " where schema_name = 'main' group by table_name").fetchall())
    missing = [table for table in PUBLISHED_TABLES if table not in columns]
    if missing:
        raise PipelineError(f"{database}: tables {', '.join(missing)} are not in the published build; "
                            "rebuild it with this code (energy-index build)")
    statements = [*SESSION_SETTINGS]
    for table in PUBLISHED_TABLES:
        reference = table in REFERENCE_TABLES
        present = paths.reference_parquet_path(table).is_file() if reference else bool(paths.parquet_files(table))
        if reference and not present:
            raise PipelineError(f"{paths.reference_parquet_path(table)}: missing; the build that published "
                                f"{database} is older than the Spark SQL; rebuild it (energy-index build)")
        statements.append(f"-- {table}: {'the published Parquet' if present else 'no rows in this build'}\n"
                          + _table_statement(table, columns[table], f"{root}/{table}" if present else None))
    macros: dict[str, Macro] = {}
    for name in (name for name in views_in_dependency_order() if name not in STORED and not is_duckdb_only(name)):
        defined = sql_object(name)
        if defined.kind == "macro":
            tree = sqlglot.parse_one(defined.statement, read="duckdb")
            macros[name] = tuple(p.name for p in tree.this.expressions), _inline_macros(tree.expression, macros)
        elif defined.kind == "view":
            statements.append(f"-- {name}: {view_description(name)}\n" + view_statement(name, macros))
    for statement in statements:
        if STATEMENT_END in statement:
            raise PipelineError(f"a statement holds ';' at the end of a line, which ends a statement here: "
                                f"{statement.splitlines()[0]}")
    header = ("-- The energy index's views in Spark SQL over the published Parquet: run with spark-sql -i, or\n"
              "-- each statement (split on ';' at a line end) with spark.sql(). Written by energy-index spark-sql.\n")
    return header + "".join(statement + STATEMENT_END + "\n" for statement in statements)


def split_statements(script: str) -> list[str]:
    """The script's statements, each to pass to spark.sql()."""
    return [statement for statement in script.split(STATEMENT_END) if statement.strip(" \n")]
