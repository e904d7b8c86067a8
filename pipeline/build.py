"""Build: load the Parquet tables into a DuckDB database with the views in sql/, published by rename."""

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow

from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import AUDIT_RULES, SQL_DIR, Paths
from pipeline.source_card import load_source_card
from pipeline.validate import json_paths
from schemas import TABLES, dictionary
from schemas.rules import RATED_BOARD_POWER_W

# Two snapshots' floats that differ by less than this, relative to the larger, are the same value: the
# upstream's re-serialisations and derived fields differ by at most 1e-15; real re-measurements by 1e-3.
CHANGE_RELATIVE_TOLERANCE = 1e-9
# The oldest DuckDB release that must open the published file (pyproject.toml's lower bound). A new
# engine writes its own storage format by default, which older clients (the DuckDB CLI, Metabase's
# and Node's drivers) refuse; this asks it for the format that release reads.
OLDEST_SUPPORTED_DUCKDB = "1.1.0"
INPUTS_HEADER = re.compile(r"^-- inputs:(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class BuildResult:
    database: Path
    views: list[str]


def view_files() -> dict[str, Path]:
    return {path.stem: path for path in sorted(SQL_DIR.glob("*.sql"))}


def views_in_dependency_order(files: dict[str, Path]) -> list[str]:
    """Order views so each comes after the views its '-- inputs:' header names."""
    inputs = {}
    for name, path in files.items():
        header = INPUTS_HEADER.search(path.read_text(encoding="utf-8"))
        if header is None:
            raise PipelineError(f"{path}: no '-- inputs:' header line naming the tables and views it reads")
        inputs[name] = {item.strip() for item in header.group(1).split(",") if item.strip()}
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise PipelineError(f"sql/{name}.sql: views depend on each other in a cycle")
        visiting.add(name)
        for dependency in sorted(inputs[name] & set(files)):
            visit(dependency)
        ordered.append(name)

    for name in sorted(files):
        visit(name)
    return ordered


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _load_tables(connection: duckdb.DuckDBPyConnection, paths: Paths) -> None:
    for table in TABLES:
        files = sorted(paths.parquet_glob(table).parent.glob(paths.parquet_glob(table).name))
        if not files:
            raise PipelineError(f"no snapshot has been ingested into table {table} yet; {NEXT_STEP}")
        connection.execute(
            f"create table {table} as select * from read_parquet($files, union_by_name = true)",
            {"files": [str(f) for f in files]},
        )


def load_audit_rules() -> list[dict[str, object]]:
    with AUDIT_RULES.open("rb") as handle:
        declared = tomllib.load(handle)
    expected = {"table", "severity", "tolerance", "why"}
    rules = []
    for rule, fields in declared.items():
        if set(fields) != expected or fields["severity"] not in ("info", "warn"):
            raise PipelineError(f"{AUDIT_RULES}: rule {rule} must have exactly {sorted(expected)}, severity info or warn")
        rules.append({"rule": rule, "table_name": fields["table"], "severity": fields["severity"],
                      "tolerance": float(fields["tolerance"]), "why": fields["why"]})
    return rules


def load_reference_tables(connection: duckdb.DuckDBPyConnection) -> None:
    """Facts declared in code that the views need: GPU ratings, latency ceilings and audit rules."""
    connection.execute("create table gpu_ratings (gpu varchar primary key, rated_board_power_w double not null)")
    connection.executemany("insert into gpu_ratings values (?, ?)", sorted(RATED_BOARD_POWER_W.items()))
    connection.execute(
        "create table audit_rules (rule varchar primary key, table_name varchar not null, severity varchar not null,"
        " tolerance double not null, why varchar not null)"
    )
    connection.executemany(
        "insert into audit_rules values ($rule, $table_name, $severity, $tolerance, $why)", load_audit_rules()
    )
    ceilings = load_source_card()["diffusion"]["default_batch_latency_ceiling_s"]
    connection.execute("create table latency_ceilings (task varchar primary key, batch_latency_ceiling_s double not null)")
    connection.executemany("insert into latency_ceilings values (?, ?)", sorted(ceilings.items()))


def create_views(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Create every view in sql/ on `connection`, each after the views it reads."""
    files = view_files()
    order = views_in_dependency_order(files)
    for view in order:
        try:
            connection.execute(files[view].read_text(encoding="utf-8"))
        except duckdb.Error as error:
            raise PipelineError(f"sql/{view}.sql: {error}") from None
    return order


def view_description(path: Path) -> str:
    """A view's description from its sql/ header: what it holds, its grain and its key."""
    text = path.read_text(encoding="utf-8")
    header = text[: text.index("\ncreate ")] if "\ncreate " in text else text
    fields: dict[str, list[str]] = {"what": []}
    current = "what"
    for line in header.splitlines():
        body = line.removeprefix("--").strip()
        label, _, rest = body.partition(":")
        if label in ("grain", "key", "inputs"):
            current, body = label, rest.strip()
            fields[current] = []
        elif current in ("inputs",) or not line.startswith("--"):
            break
        fields[current].append(body)
    what = " ".join(fields["what"]).split(":", 1)[1].strip()
    grain, key = " ".join(fields.get("grain", [])), " ".join(fields.get("key", []))
    return f"{what[0].upper()}{what[1:]} Grain: {grain}. Key: {key}."


def _column_source(table: str, column: str) -> str:
    """Where a column comes from: an upstream JSON key, the pipeline, or the view that computes it."""
    if table not in TABLES:
        return f"sql/{table}.sql" if table in view_files() else dictionary.table_source(table)
    json_path = json_paths(TABLES[table]).get(column)
    if json_path is None:
        return "pipeline (ingest)"
    return f"{dictionary.table_source(table)}.{'.'.join(json_path)}"


def describe_objects(connection: duckdb.DuckDBPyConnection) -> None:
    """Comment every table, view and column from the field dictionary and fill data_dictionary.
    A column with no dictionary entry fails the build: nothing reaches a reader undocumented."""
    connection.execute(
        "create table data_dictionary (object_name varchar not null, kind varchar not null,"
        " object_description varchar not null, column_name varchar not null, position integer not null,"
        " data_type varchar not null, unit varchar, description varchar not null, source varchar not null,"
        " primary key (object_name, column_name))"
    )
    objects = dict(connection.execute(
        "select table_name, 'table' from duckdb_tables() where schema_name = 'main' and not internal"
        " union all select view_name, 'view' from duckdb_views() where schema_name = 'main' and not internal"
    ).fetchall())
    files = view_files()
    descriptions = {
        name: view_description(files[name]) if kind == "view" else dictionary.table_description(name)
        for name, kind in objects.items()
    }
    rows, statements, missing = [], [], []
    for name, column, position, data_type in connection.execute(
        "select table_name, column_name, column_index, data_type from duckdb_columns()"
        " where schema_name = 'main' and not internal order by table_name, column_index"
    ).fetchall():
        try:
            entry = dictionary.column(name, column)
        except KeyError as error:
            missing.append(str(error).strip("'\""))
            continue
        statements.append(f"comment on column {name}.{column} is {_sql_literal(entry.description)};")
        rows.append((name, objects[name], descriptions[name], column, position, data_type, entry.unit,
                     entry.description, _column_source(name, column)))
    if missing:
        raise PipelineError("columns missing from the field dictionary (schemas/dictionary.toml)", missing)
    statements += [
        f"comment on {objects[name]} {name} is {_sql_literal(description)};" for name, description in descriptions.items()
    ]
    connection.execute("\n".join(statements))
    # One Arrow table rather than executemany, which inserts row by row (0.4 s for 500 rows here).
    names = ["object_name", "kind", "object_description", "column_name", "position", "data_type", "unit",
             "description", "source"]
    entries = pyarrow.Table.from_pylist([dict(zip(names, row)) for row in rows])
    connection.register("dictionary_entries", entries)
    connection.execute("insert into data_dictionary by name select * from dictionary_entries")
    connection.unregister("dictionary_entries")


def build(paths: Paths, itl_deadline_ms: float, snapshot_id: str | None = None) -> BuildResult:
    """Build the database; the index is built from `snapshot_id`, by default the newest snapshot."""
    if not (itl_deadline_ms > 0):
        raise PipelineError(f"ITL deadline must be a positive number of milliseconds, got {itl_deadline_ms}")
    paths.build_root.mkdir(parents=True, exist_ok=True)
    staging = paths.build_root / f".{paths.database.name}.{os.getpid()}.tmp"
    for leftover in (staging, Path(f"{staging}.wal")):
        leftover.unlink(missing_ok=True)
    try:
        connection = duckdb.connect(
            str(staging), config={"storage_compatibility_version": f"v{OLDEST_SUPPORTED_DUCKDB}"}
        )
        try:
            _load_tables(connection, paths)
            snapshot_ids = [row[0] for row in connection.execute("select snapshot_id from snapshots order by 1").fetchall()]
            if snapshot_id is not None and snapshot_id not in snapshot_ids:
                raise PipelineError(
                    f"snapshot {snapshot_id} is not in the Parquet tables; ingested: {', '.join(snapshot_ids)}"
                )
            connection.execute(
                "create table build_parameters as"
                " select $snapshot_id::varchar as snapshot_id, $deadline::double as itl_deadline_ms,"
                " $tolerance::double as change_relative_tolerance",
                {"snapshot_id": snapshot_id, "deadline": itl_deadline_ms, "tolerance": CHANGE_RELATIVE_TOLERANCE},
            )
            load_reference_tables(connection)
            create_views(connection)
            describe_objects(connection)
            connection.execute("checkpoint")
        finally:
            connection.close()
        os.replace(staging, paths.database)
    finally:
        staging.unlink(missing_ok=True)
        Path(f"{staging}.wal").unlink(missing_ok=True)
    return BuildResult(paths.database, views_in_dependency_order(view_files()))
