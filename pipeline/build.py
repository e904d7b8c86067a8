"""Build: load the Parquet tables into a DuckDB database with the views in sql/, published by rename."""

import functools
import hashlib
import os
import shutil
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow
import pyarrow.parquet as pq

from pipeline.database import connect
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.files import atomic_path, write_bytes_atomic
from pipeline.progress import progress
from pipeline.paths import (
    AUDIT_RULES, BOUNDARY_FACTORS, ECOLOGITS, LATENCY_TIERS, SOURCE_CARD, SQL_DIR, Paths, code_digest, hive_key,
)
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
    appended: bool = False
    notices: tuple[str, ...] = ()


@functools.cache
def view_files() -> dict[str, Path]:
    return {path.stem: path for path in sorted(SQL_DIR.glob("*.sql"))}


def views_in_dependency_order(files: dict[str, Path]) -> list[str]:
    """Order the sql/ files and the stored tables (STORED) so each comes after what its '-- inputs:'
    header names (a stored table after its macro and snapshot_history)."""
    inputs = {name: {STORED[name][0], "snapshot_history"} for name in STORED}
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
        for dependency in sorted(inputs[name] & inputs.keys()):
            visit(dependency)
        ordered.append(name)

    for name in sorted(inputs):
        visit(name)
    return ordered


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _parquet_files(paths: Paths) -> dict[tuple[str, str], str]:
    """Every ingested Parquet file, (table, snapshot id) -> a signature that a re-ingest changes (the
    file is replaced, so its inode and mtime change)."""
    files = {}
    for table in TABLES:
        for snapshot_id, path in paths.parquet_files(table).items():
            stat = path.stat()
            files[(table, snapshot_id)] = f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"
        if not any(key[0] == table for key in files):
            raise PipelineError(f"no snapshot has been ingested into table {table} yet; {NEXT_STEP}")
    return files


def _load_tables(connection: duckdb.DuckDBPyConnection, paths: Paths, loaded: dict[tuple[str, str], str]) -> None:
    """Bring the data tables up to the Parquet files: all of them into new tables, or, in a copy of
    the published database (`loaded` says what it holds), only the snapshots added or re-ingested."""
    files = _parquet_files(paths)
    for table in TABLES:
        if not loaded:
            connection.execute(
                f"create table {table} as select * from read_parquet($files, union_by_name = true, hive_partitioning = false)",
                {"files": [str(paths.parquet_path(table, s)) for (t, s) in files if t == table]},
            )
            continue
        for key in sorted(loaded.keys() - files.keys()):
            if key[0] == table:
                connection.execute(f"delete from {table} where snapshot_id = $id", {"id": key[1]})
        for key, signature in sorted(files.items()):
            if key[0] == table and loaded.get(key) != signature:
                connection.execute(f"delete from {table} where snapshot_id = $id", {"id": key[1]})
                connection.execute(
                    f"insert into {table} by name select * from read_parquet($file, hive_partitioning = false)",
                    {"file": str(paths.parquet_path(table, key[1]))},
                )
    connection.execute("create or replace table build_inputs (table_name varchar, snapshot_id varchar,"
                       " signature varchar, code varchar)")
    code = code_digest()
    _insert_rows(connection, "build_inputs", ["table_name", "snapshot_id", "signature", "code"],
                 [(table, snapshot, signature, code) for (table, snapshot), signature in sorted(files.items())])


def _insert_rows(connection: duckdb.DuckDBPyConnection, table: str, names: list[str], rows: list[tuple]) -> None:
    """Insert Python rows through one Arrow table: executemany inserts row by row (0.4 s for 500 rows here)."""
    connection.register("rows_to_insert", pyarrow.Table.from_pylist([dict(zip(names, row)) for row in rows]))
    try:
        connection.execute(f"insert into {table} by name select * from rows_to_insert")
    finally:
        connection.unregister("rows_to_insert")


def _reusable_database(paths: Paths, staging: Path) -> dict[tuple[str, str], str]:
    """Copy the published database to `staging` when it was built by this code, and say which
    Parquet files it holds; otherwise leave `staging` absent and return nothing (a full build).

    Appending to a copy costs the copy (a fraction of a second at 200 snapshots) and the new rows;
    reloading every snapshot's Parquet costs time that grows with the history (8.6 s at 200)."""
    published = Paths(paths.out).database
    if not published.is_file():
        return {}
    try:
        with connect(str(published), read_only=True) as connection:
            rows = connection.execute("select table_name, snapshot_id, signature, code from build_inputs").fetchall()
    except duckdb.Error:
        return {}
    if not rows or {row[3] for row in rows} != {code_digest()}:
        return {}
    shutil.copyfile(published, staging)
    return {(table, snapshot): signature for table, snapshot, signature, _ in rows}


def load_audit_rules() -> list[dict[str, object]]:
    with AUDIT_RULES.open("rb") as handle:
        declared = tomllib.load(handle)
    expected = {"table", "severity", "tolerance", "why", "direction", "measure"}
    rules = []
    for rule, fields in declared.items():
        if (set(fields) != expected or fields["severity"] not in ("info", "warn")
                or fields["direction"] not in ("around_one", "at_least", "at_most")
                or round(float(fields["tolerance"]), 6) != float(fields["tolerance"])):
            raise PipelineError(
                f"{AUDIT_RULES}: rule {rule} must have exactly {sorted(expected)}, severity info or warn, "
                "direction around_one, at_least or at_most, and a tolerance of at most six decimals "
                "(audit_findings writes it with six)"
            )
        rules.append({"rule": rule, "table_name": fields["table"], "severity": fields["severity"],
                      "tolerance": float(fields["tolerance"]), "direction": fields["direction"],
                      "measure": fields["measure"], "why": fields["why"]})
    return rules


def load_latency_tiers(path: Path) -> list[tuple[str, str | None, str, float]]:
    """(family, task, latency metric, limit) rows from a latency_tiers.toml layout, checked."""
    try:
        with path.open("rb") as handle:
            declared = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PipelineError(f"{path}: cannot read latency tiers: {error}") from None
    metrics = {"token": ("median_itl_ms", "p90_itl_ms", "p99_itl_ms"), "diffusion": ("batch_latency_s",)}
    rows, problems = [], []
    groups = [("token", None, declared.get("token", {}))]
    groups += [("diffusion", task, limits) for task, limits in declared.get("diffusion", {}).items()]
    for family, task, limits in groups:
        for metric, values in limits.items():
            where = f"[{family}{'.' + task if task else ''}] {metric}"
            if metric not in metrics[family]:
                problems.append(f"{where}: not a latency metric of {family} tasks ({', '.join(metrics[family])})")
            elif not (isinstance(values, list) and values and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)):
                problems.append(f"{where}: must be a list of positive numbers")
            else:
                rows += [(family, task, metric, float(value)) for value in sorted(set(values))]
    if set(declared) - {"token", "diffusion"}:
        problems.append(f"unknown sections {sorted(set(declared) - {'token', 'diffusion'})}; expected token, diffusion")
    if problems:
        raise PipelineError(f"{path}: latency tiers are not valid", problems)
    return rows


# boundary_factors.toml: each [[factor]]'s keys and their types, in the table's column order.
BOUNDARY_FACTOR_KEYS = {
    "boundary": str, "factor_low": float, "factor_central": float, "factor_high": float, "central": bool,
    "covers": str, "derivation": str, "source": str, "url": str, "year": int, "quoted_figure": str,
}
BOUNDARIES = ("server", "facility")


def _is_of_type(value: object, kind: type) -> bool:
    """TOML's types as the table wants them: a whole number is a float too; a boolean is not a number."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def load_boundary_factors(path: Path = BOUNDARY_FACTORS) -> list[dict[str, object]]:
    """The [[factor]] rows of a boundary_factors.toml, checked strictly: every key present and no other,
    each of its type, factors of at least 1 with low <= central <= high, and one central row per boundary."""
    try:
        with path.open("rb") as handle:
            declared = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PipelineError(f"{path}: cannot read boundary factors: {error}") from None
    problems = []
    if set(declared) - {"factor"}:
        problems.append(f"unknown top-level keys {sorted(set(declared) - {'factor'})}; expected [[factor]] tables")
    factors = declared.get("factor", [])
    if not isinstance(factors, list) or not factors:
        problems.append("no [[factor]] tables")
        factors = []
    rows = []
    for number, fields in enumerate(factors, start=1):
        where = f"[[factor]] {number}"
        missing, unknown = BOUNDARY_FACTOR_KEYS.keys() - fields.keys(), fields.keys() - BOUNDARY_FACTOR_KEYS.keys()
        if missing or unknown:
            problems.append(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
            continue
        wrong = [key for key, kind in BOUNDARY_FACTOR_KEYS.items() if not _is_of_type(fields[key], kind)]
        if wrong:
            problems.append(f"{where}: wrong type for {wrong} (expected {[BOUNDARY_FACTOR_KEYS[k].__name__ for k in wrong]})")
            continue
        if fields["boundary"] not in BOUNDARIES:
            problems.append(f"{where}: boundary {fields['boundary']!r} is not one of {', '.join(BOUNDARIES)}")
        if not 1 <= fields["factor_low"] <= fields["factor_central"] <= fields["factor_high"]:
            problems.append(f"{where}: factors must satisfy 1 <= factor_low <= factor_central <= factor_high")
        empty = [key for key, kind in BOUNDARY_FACTOR_KEYS.items() if kind is str and not fields[key].strip()]
        if empty:
            problems.append(f"{where}: empty {empty}")
        if not fields["url"].startswith("https://"):
            problems.append(f"{where}: url must be an https:// address")
        rows.append({key: float(fields[key]) if kind is float else fields[key] for key, kind in BOUNDARY_FACTOR_KEYS.items()})
    for boundary in BOUNDARIES:
        central = [row for row in rows if row["boundary"] == boundary and row["central"]]
        if len(central) != 1:
            problems.append(f"boundary {boundary}: needs exactly one row with central = true, has {len(central)}")
    if problems:
        raise PipelineError(f"{path}: boundary factors are not valid", problems)
    return rows


# Tables the build makes from its parameters and declarations rather than from a snapshot: besides the
# database, each is published as OUT/parquet/<table>/data.parquet so that the views can be run over
# the Parquet alone (Spark: pipeline/spark.py).
REFERENCE_TABLES = ("build_parameters", "latency_tiers", "ecologits_coefficients", "gpu_ratings", "audit_rules",
                    "latency_ceilings", "boundary_factors")


def load_reference_tables(connection: duckdb.DuckDBPyConnection, latency_tiers: Path = LATENCY_TIERS) -> None:
    """Facts declared in code that the views need: GPU ratings, latency ceilings and tiers, audit rules,
    boundary factors."""
    connection.execute(
        "create or replace table latency_tiers (family varchar not null, task varchar, latency_metric varchar not null,"
        " latency_limit double not null)"
    )
    connection.executemany("insert into latency_tiers values (?, ?, ?, ?)", load_latency_tiers(latency_tiers))
    with ECOLOGITS.open("rb") as handle:
        ecologits = tomllib.load(handle)
    connection.execute(
        "create or replace table ecologits_coefficients as select $version::varchar as version, $source::varchar as source,"
        " $alpha::double as alpha, $beta::double as beta, $gamma::double as gamma, $batch_size::bigint as batch_size,"
        " $quantization_bits::bigint as quantization_bits, $gpu_memory_gb::double as gpu_memory_gb,"
        " $memory_overhead::double as memory_overhead",
        ecologits,
    )
    connection.execute(
        "create or replace table boundary_factors (boundary varchar not null, factor_low double not null,"
        " factor_central double not null, factor_high double not null, central boolean not null, covers varchar not null,"
        " derivation varchar not null, source varchar not null, url varchar not null, year integer not null,"
        " quoted_figure varchar not null)"
    )
    _insert_rows(connection, "boundary_factors", list(BOUNDARY_FACTOR_KEYS), [tuple(row.values()) for row in load_boundary_factors()])
    connection.execute("create or replace table gpu_ratings (gpu varchar primary key, rated_board_power_w double not null)")
    connection.executemany("insert into gpu_ratings values (?, ?)", sorted(RATED_BOARD_POWER_W.items()))
    connection.execute(
        "create or replace table audit_rules (rule varchar primary key, table_name varchar not null, severity varchar not null,"
        " tolerance double not null, direction varchar not null, measure varchar not null, why varchar not null)"
    )
    connection.executemany(
        "insert into audit_rules values ($rule, $table_name, $severity, $tolerance, $direction, $measure, $why)",
        load_audit_rules()
    )
    ceilings = load_source_card().diffusion.default_batch_latency_ceiling_s
    connection.execute("create or replace table latency_ceilings (task varchar primary key, batch_latency_ceiling_s double not null)")
    connection.executemany("insert into latency_ceilings values (?, ?)", sorted(ceilings.items()))


def _publish_reference_tables(connection: duckdb.DuckDBPyConnection, paths: Paths) -> None:
    """Write each reference table as Parquet beside the data tables, with its descriptions as the
    ingested tables carry them; a file that would not change is left untouched."""
    for table in REFERENCE_TABLES:
        relation = connection.sql(f"select * from {table} order by all")
        rows = (getattr(relation, "to_arrow_table", None) or relation.arrow)()
        fields = []
        for field in rows.schema:
            entry = dictionary.column(table, field.name)
            fields.append(field.with_metadata({"description": entry.description, **({"unit": entry.unit} if entry.unit else {})}))
        schema = pyarrow.schema(fields, metadata={"description": dictionary.table_description(table)})
        rows = pyarrow.Table.from_arrays(rows.columns, schema=schema)
        buffer = pyarrow.BufferOutputStream()
        pq.write_table(rows, buffer, compression="zstd")
        write_bytes_atomic(paths.reference_parquet_path(table), buffer.getvalue().to_pybytes())


def create_views(
    connection: duckdb.DuckDBPyConnection, store: Callable[[str], None] | None = None
) -> list[str]:
    """Create every view and macro in sql/ on `connection`, each after what it reads; a stored table
    is made by `store` when its turn comes (without one, as a view over its macro, for tests)."""
    files = view_files()
    order = views_in_dependency_order(files)
    for name in order:
        if name in STORED:
            macro, kind = STORED[name]
            if store is not None:
                store(name)
            elif kind == "snapshot":
                connection.execute(f"create or replace view {name} as select * from {macro}(null)")
            continue
        try:
            connection.execute(files[name].read_text(encoding="utf-8"))
        except duckdb.Error as error:
            raise PipelineError(f"sql/{name}.sql: {error}") from None
    return [name for name in order if name not in STORED]


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


# Tables stored beside the ingested ones, one Parquet file per snapshot (or per consecutive pair,
# under the newer snapshot) and loaded as tables: each unit is computed once, by its table macro,
# when it first appears or its inputs change, so a refresh costs the same whatever the history's
# length. table -> (table macro, "snapshot" or "pair").
STORED = {
    "best_configuration_history": ("best_configurations_in", "snapshot"),
    "configuration_changes": ("configuration_diff", "pair"),
    "index_changes": ("index_diff", "pair"),
}
# What a stored unit's rows depend on besides the build parameters and the SQL.
STORED_INPUT_TABLES = ("token_configurations", "diffusion_configurations")


def _unit_inputs(paths: Paths, snapshot_ids: tuple[str, ...], context: str) -> bytes:
    """A digest of what one stored unit was computed from: its snapshots' files (a re-ingest replaces
    a file, so its inode and mtime change), the build parameters and the SQL."""
    digest = hashlib.sha256(context.encode())
    for snapshot_id in snapshot_ids:
        for table in STORED_INPUT_TABLES:
            stat = paths.parquet_path(table, snapshot_id).stat()
            digest.update(f"{table}/{snapshot_id}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}".encode())
    return digest.hexdigest().encode()


def _stored_inputs(target: Path, notices: list[str]) -> bytes | None:
    """What a stored file says it was computed from; None when it is missing or cannot be read (a
    damaged file is only a cache of what the build can compute again, so it is recomputed, said once)."""
    if not target.is_file():
        return None
    try:
        return (pq.read_schema(target).metadata or {}).get(b"inputs")
    except (pyarrow.ArrowException, OSError) as error:
        notices.append(f"{target}: cannot be read ({str(error).splitlines()[0]}); computing it again")
        return None


def _store(connection: duckdb.DuckDBPyConnection, paths: Paths, table: str, notices: list[str]) -> None:
    """Compute the stored rows of every unit (snapshot or consecutive pair) whose file is missing,
    stale or unreadable, drop those no longer wanted, and load them all as the table."""
    macro, kind = STORED[table]
    code = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(SQL_DIR.glob("*.sql"))))
    code.update(SOURCE_CARD.read_bytes())
    parameters = connection.execute("select itl_deadline_ms, change_relative_tolerance from build_parameters").fetchone()
    context = f"{code.hexdigest()}:{parameters!r}"
    history = connection.execute(
        "select previous_snapshot_id, snapshot_id from snapshot_history order by position"
    ).fetchall()
    units = [(snapshot,) for _, snapshot in history] if kind == "snapshot" else [
        (older, newer) for older, newer in history if older is not None
    ]
    stale = []
    for unit in units:
        inputs = _unit_inputs(paths, unit, context)
        if _stored_inputs(paths.parquet_path(table, unit[-1]), notices) != inputs:
            stale.append((unit, inputs))
    with progress(len(stale), f"build: {table}", unit="snapshot") as bar:
        for unit, inputs in stale:
            arguments = ", ".join(f"$u{i}" for i in range(len(unit)))
            relation = connection.sql(f"select * from {macro}({arguments}) order by all",
                                      params={f"u{i}": value for i, value in enumerate(unit)})
            rows = (getattr(relation, "to_arrow_table", None) or relation.arrow)()
            with atomic_path(paths.parquet_path(table, unit[-1])) as tmp:
                pq.write_table(rows.replace_schema_metadata({"inputs": inputs}), tmp, compression="zstd")
            bar.update(1)
    wanted = {unit[-1] for unit in units}
    for snapshot_id, stale in paths.parquet_files(table).items():
        if snapshot_id not in wanted:
            shutil.rmtree(stale.parent)
    # Folders of an earlier layout (another key) would be read as a second partition column.
    for folder in (paths.parquet_dir / table).glob("*=*"):
        if not folder.name.startswith(f"{hive_key(table)}="):
            shutil.rmtree(folder)
    files = [str(path) for path in paths.parquet_files(table).values()]
    empty = f"{macro}({', '.join(['$none'] * (1 if kind == 'snapshot' else 2))}) limit 0"
    source = "read_parquet($files, hive_partitioning = false)" if files else empty
    connection.execute(f"create or replace table {table} as select * from {source}",
                       {"files": files} if files else {"none": ""})


def _column_source(table: str, column: str) -> str:
    """Where a column comes from: an upstream JSON key, the pipeline, or the view that computes it."""
    if table in STORED:
        return f"sql/{STORED[table][0]}.sql"
    if table not in TABLES:
        return f"sql/{table}.sql" if table in view_files() else dictionary.table_source(table)
    json_path = json_paths(TABLES[table]).get(column)
    if json_path is None:
        return "pipeline (ingest)"
    return f"{dictionary.table_source(table)}.{'.'.join(json_path)}"


def describe_objects(connection: duckdb.DuckDBPyConnection) -> None:
    """Comment every table, view and column from the field dictionary and fill data_dictionary.
    A column with no dictionary entry fails the build: nothing reaches a reader undocumented."""
    # Created empty first, so that it lists itself.
    connection.execute(
        "create or replace table data_dictionary (object_name varchar, kind varchar, object_description varchar,"
        " column_name varchar, position bigint, data_type varchar, unit varchar, description varchar, source varchar)"
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
    # One transaction: committed one by one, the 600-odd comments took twice as long.
    connection.execute("\n".join(["begin;", *statements, "commit;"]))
    _insert_rows(connection, "data_dictionary", ["object_name", "kind", "object_description", "column_name", "position",
                                                 "data_type", "unit", "description", "source"], rows)


def build(
    paths: Paths, itl_deadline_ms: float, snapshot_id: str | None = None, full: bool = False,
    latency_tiers: Path = LATENCY_TIERS,
) -> BuildResult:
    """Build the database; the index is built from `snapshot_id`, by default the newest snapshot.
    Unless `full`, the published database is copied and brought up to date when this code built it."""
    if not (itl_deadline_ms > 0):
        raise PipelineError(f"ITL deadline must be a positive number of milliseconds, got {itl_deadline_ms}")
    paths.build_root.mkdir(parents=True, exist_ok=True)
    staging = paths.build_root / f".{paths.database.name}.{os.getpid()}.tmp"
    for leftover in (staging, Path(f"{staging}.wal")):
        leftover.unlink(missing_ok=True)
    notices: list[str] = []
    try:
        loaded = {} if full else _reusable_database(paths, staging)
        connection = connect(
            str(staging), config={"storage_compatibility_version": f"v{OLDEST_SUPPORTED_DUCKDB}"}
        )
        try:
            _load_tables(connection, paths, loaded)
            snapshot_ids = [row[0] for row in connection.execute("select snapshot_id from snapshots order by 1").fetchall()]
            if snapshot_id is not None and snapshot_id not in snapshot_ids:
                raise PipelineError(
                    f"snapshot {snapshot_id} is not in the Parquet tables; ingested: {', '.join(snapshot_ids)}"
                )
            connection.execute(
                "create or replace table build_parameters as"
                " select $snapshot_id::varchar as snapshot_id, $deadline::double as itl_deadline_ms,"
                " $tolerance::double as change_relative_tolerance",
                {"snapshot_id": snapshot_id, "deadline": itl_deadline_ms, "tolerance": CHANGE_RELATIVE_TOLERANCE},
            )
            load_reference_tables(connection, latency_tiers)
            _publish_reference_tables(connection, paths)
            create_views(connection, lambda table: _store(connection, paths, table, notices))
            describe_objects(connection)
            connection.execute("checkpoint")
        finally:
            connection.close()
        os.replace(staging, paths.database)
    finally:
        staging.unlink(missing_ok=True)
        Path(f"{staging}.wal").unlink(missing_ok=True)
    return BuildResult(paths.database, list(view_files()), appended=bool(loaded), notices=tuple(notices))
