"""Build: load the Parquet tables into a DuckDB database with the views in sql/, published by rename."""

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import AUDIT_RULES, SQL_DIR, Paths
from pipeline.source_card import load_source_card
from pipeline.validate import column_descriptions
from schemas import TABLES
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
    for table, model in TABLES.items():
        files = sorted(paths.parquet_glob(table).parent.glob(paths.parquet_glob(table).name))
        if not files:
            raise PipelineError(f"no snapshot has been ingested into table {table} yet; {NEXT_STEP}")
        connection.execute(
            f"create table {table} as select * from read_parquet($files, union_by_name = true)",
            {"files": [str(f) for f in files]},
        )
        doc = (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else table
        comments = [f"comment on table {table} is {_sql_literal(doc)};"]
        comments += [
            f"comment on column {table}.{column} is {_sql_literal(description)};"
            for column, description in column_descriptions(model).items()
        ]
        connection.execute("\n".join(comments))


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
    connection.execute("comment on table gpu_ratings is 'Rated board power per GPU model, watts (schemas/rules.py).'")
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
    connection.execute(
        "comment on table latency_ceilings is 'The leaderboard''s default batch-latency ceiling per diffusion task, "
        "seconds (pipeline/source_card.toml).'"
    )
    connection.execute("comment on table audit_rules is 'Plausibility audit rules: tolerance, severity and reason (pipeline/audit_rules.toml).'")


def create_views(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Create every view in sql/ on `connection`, each after the views it reads."""
    files = view_files()
    order = views_in_dependency_order(files)
    for view in order:
        try:
            connection.execute(files[view].read_text(encoding="utf-8"))
        except duckdb.Error as error:
            raise PipelineError(f"sql/{view}.sql: {error}") from None
    _inherit_column_comments(connection, order)
    return order


def _inherit_column_comments(connection: duckdb.DuckDBPyConnection, views: list[str]) -> None:
    """A view column passed through unchanged keeps the description of the same-named column it came from.

    Only columns a view computes need their own comment in its sql/ file. Views are visited in
    dependency order, so a view inherits what the views it reads inherited.
    """
    described: dict[str, str] = {}
    columns_by_view: dict[str, list[str]] = {}
    for table, column, comment in connection.execute(
        "select table_name, column_name, comment from duckdb_columns() order by table_name, column_index"
    ).fetchall():
        if comment is not None:
            described.setdefault(column, comment)
        elif table in views:
            columns_by_view.setdefault(table, []).append(column)
    statements = []
    for view in views:
        for column in columns_by_view.get(view, []):
            if column in described:
                statements.append(f"comment on column {view}.{column} is {_sql_literal(described[column])};")
    if statements:
        connection.execute("\n".join(statements))


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
            connection.execute(
                "comment on table build_parameters is 'The parameters this database was built with (one row); "
                "a null snapshot_id means the index is built from the newest snapshot.'"
            )
            load_reference_tables(connection)
            create_views(connection)
            connection.execute("checkpoint")
        finally:
            connection.close()
        os.replace(staging, paths.database)
    finally:
        staging.unlink(missing_ok=True)
        Path(f"{staging}.wal").unlink(missing_ok=True)
    return BuildResult(paths.database, views_in_dependency_order(view_files()))
