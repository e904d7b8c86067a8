"""Build: load the Parquet tables into a DuckDB database with the views in sql/, published by rename."""

import contextlib
import functools
import importlib
import importlib.util
import os
import re
import shutil
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Annotated, Literal

import duckdb
import msgspec
import pyarrow
import pyarrow.parquet as pq

from pipeline import __version__
from pipeline.archive import snapshot_ordered_at
from pipeline.database import connect
from pipeline.errors import NEXT_STEP, PipelineError, shown, snapshot_id_for
from pipeline.files import atomic_path, read_toml, write_bytes_atomic
from pipeline.fingerprint import data_sha256, file_sha256, files_sha256
from pipeline.progress import progress
from pipeline.paths import (
    AUDIT_RULES, BOUNDARY_FACTORS, ECOLOGITS, INDEX_V2, LATENCY_TIERS, SOURCE_CARD, SQL_DIR, Paths, code_digest,
    hive_key, order_column,
)
from pipeline.settings import size_bytes
from pipeline.source_card import load_source_card
from schemas import REFERENCE_TABLES, TABLE_NAMES, arrow_schema, ddl, described, dictionary, for_readers
from schemas.rules import RATED_BOARD_POWER_W

# Two snapshots' floats that differ by less than this, relative to the larger, are the same value: the
# upstream's re-serialisations and derived fields differ by at most 1e-15; real re-measurements by 1e-3.
CHANGE_RELATIVE_TOLERANCE = 1e-9
# The oldest DuckDB release that must open the published file (pyproject.toml's lower bound). A new
# engine writes its own storage format by default, which older clients (the DuckDB CLI, Metabase's
# and Node's drivers) refuse; this asks it for the format that release reads.
OLDEST_SUPPORTED_DUCKDB = "1.1.0"
# The most the build's DuckDB holds (beyond it, it spills to a file beside the database), unless DuckDB's
# own default is less (80 % of the memory the machine or its container allows). With its default DuckDB
# keeps every block it has read or written while it has room: the 1000x synthetic snapshot's build alone
# peaked at 3.2 GB, and the 1000x refresh over its 3 GB bound; held to 2 GB, that build peaked at 2.3 GB
# and took as long (docs/performance.md). The real snapshots' builds use a few hundred MB.
BUILD_MEMORY_BYTES = 2 * 1000 ** 3
# A table or function a statement reads, in json_serialize_sql's text (a name in a string literal is
# escaped there, so it cannot match).
REFERENCE = re.compile(r'"(?:table_name|function_name)":"(\w+)"')
# A sql/ file's statement: view or macro, its name, (past a macro's parameters) "table" for a table macro, the body.
SQL_OBJECT = re.compile(
    r"^create or replace (?P<kind>view|macro)\s+(?P<name>\w+)\s*(?:\(.*?\)\s*)?as\s+"
    r"(?P<table>table\s+)?(?P<body>.*?);?\s*\Z", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class BuildResult:
    views: list[str]
    index_snapshot: str  # the snapshot the index is built from
    appended: bool = False
    notices: tuple[str, ...] = ()
    # Seconds spent fitting (FITTED, the import included), one figure per snapshot fitted: the refresh
    # reports it as part of its build step, and make bench reads it there.
    fitting_seconds: tuple[float, ...] = ()


@functools.cache
def view_files() -> dict[str, Path]:
    """Every view and macro of sql/ and its subfolders (the layers), by name."""
    return {path.stem: path for path in sorted(SQL_DIR.rglob("*.sql"))}


def sql_path(name: str) -> str:
    return view_files()[name].relative_to(SQL_DIR.parent).as_posix()


@dataclass(frozen=True)
class SqlObject:
    kind: str  # "view", "macro" (scalar) or "table macro"
    body: str  # the view's query or the macro's expression
    statement: str  # the file's CREATE statement


@functools.cache
def sql_object(name: str) -> SqlObject:
    """A sql/ file's one CREATE statement, parsed: what it defines and the query or expression it runs."""
    text = view_files()[name].read_text(encoding="utf-8")
    match = SQL_OBJECT.search(text)
    if match is None or match["name"] != name:
        raise PipelineError(f"{sql_path(name)}: not one 'create or replace view|macro {name} ... as' statement")
    kind = "view" if match["kind"] == "view" else "table macro" if match["table"] else "macro"
    return SqlObject(kind, match["body"], text[match.start():])


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


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _signature(path: Path) -> str:
    """What a re-ingest changes: it replaces the file, so its inode and mtime change."""
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def _load_tables(connection: duckdb.DuckDBPyConnection, paths: Paths, loaded: dict[tuple[str, str], str]) -> None:
    """Bring the data tables up to the Parquet files: all of them into new tables, or, in a copy of
    the published database (`loaded` says what it holds), only the snapshots added or re-ingested."""
    files = {(table, snapshot): _signature(path)
             for table in TABLE_NAMES for snapshot, path in paths.parquet_files(table).items()}
    for table in TABLE_NAMES:
        # The files' order column is for their readers; the database's order is snapshot_history's.
        read = (f"select * exclude ({order_column(table)})"
                " from read_parquet($files, union_by_name = true, hive_partitioning = false)")
        if not any(key[0] == table for key in files):
            raise PipelineError(f"no snapshot has been ingested into table {table} yet; {NEXT_STEP}")
        changed = sorted(snapshot for name, snapshot in loaded.keys() | files.keys()
                         if name == table and loaded.get((name, snapshot)) != files.get((name, snapshot)))
        new_files = [str(paths.parquet_path(table, snapshot)) for snapshot in changed if (table, snapshot) in files]
        if not loaded:
            connection.execute(f"create table {table} as {read}", {"files": new_files})
        elif changed:
            connection.execute(f"delete from {table} where list_contains($ids, snapshot_id)", {"ids": changed})
            if new_files:
                connection.execute(f"insert into {table} by name {read}", {"files": new_files})
    code = code_digest()
    _create_table(connection, "build_inputs", [(*key, signature, code) for key, signature in sorted(files.items())])


def _arrow_rows(table: str, rows: list[tuple]) -> pyarrow.Table:
    """Python rows, each with every column of a declared table in order, as an Arrow table of its schema."""
    schema = arrow_schema(table)
    columns = list(zip(*rows)) or [()] * len(schema)
    return pyarrow.Table.from_arrays([pyarrow.array(values, field.type) for values, field in zip(columns, schema)],
                                     schema=schema)


def _create_table(connection: duckdb.DuckDBPyConnection, table: str, rows: list[tuple] | pyarrow.Table) -> None:
    """Create a declared table (its DDL from the field dictionary) and insert its rows, through one Arrow
    table: executemany inserts row by row (0.4 s for 500 rows here)."""
    connection.execute(f"create or replace table {table} ({ddl(table)})")
    _insert_rows(connection, table, rows)


def _insert_rows(connection: duckdb.DuckDBPyConnection, table: str, rows: list[tuple] | pyarrow.Table) -> None:
    arrow = rows if isinstance(rows, pyarrow.Table) else _arrow_rows(table, rows)
    if arrow.num_rows:
        connection.from_arrow(arrow).insert_into(table)


def _reusable_database(paths: Paths, staging: Path) -> dict[tuple[str, str], str]:
    """Copy the published database to `staging` when it was built by this code, and say which
    Parquet files it holds; otherwise leave `staging` absent and return nothing (a full build).

    Appending to a copy costs the copy (a fraction of a second at 200 snapshots) and the new rows;
    reloading every snapshot's Parquet costs time that grows with the history (8.6 s at 200)."""
    published = Paths(paths.out).database
    try:
        with connect(str(published), read_only=True) as connection:
            rows = connection.execute("select table_name, snapshot_id, signature, code from build_inputs").fetchall()
    except duckdb.Error:  # none published, or not readable
        return {}
    if {row[3] for row in rows} != {code_digest()}:
        return {}
    shutil.copyfile(published, staging)
    return {(table, snapshot): signature for table, snapshot, signature, _ in rows}


Positive = Annotated[float, msgspec.Meta(gt=0)]
Factor = Annotated[float, msgspec.Meta(ge=1)]
Text = Annotated[str, msgspec.Meta(pattern=r"\S")]


class AuditRule(msgspec.Struct, forbid_unknown_fields=True):
    table: str
    severity: Literal["info", "warn"]
    tolerance: float
    why: str
    direction: Literal["around_one", "at_least", "at_most"]
    measure: str


class LatencyTiers(msgspec.Struct, forbid_unknown_fields=True):
    token: dict[str, Annotated[list[Positive], msgspec.Meta(min_length=1)]] = {}
    diffusion: dict[str, dict[str, Annotated[list[Positive], msgspec.Meta(min_length=1)]]] = {}


class BoundaryFactor(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A [[factor]] of boundary_factors.toml, its fields in the boundary_factors table's column order."""
    id: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")]
    boundary: Literal["server", "facility"]
    factor_low: Factor | None = None
    factor_central: Factor | None = None
    factor_high: Factor | None = None
    host_watts_per_gpu: Annotated[float, msgspec.Meta(gt=0)] | None = None
    central: bool
    covers: Text
    derivation: Text
    source: Text
    url: Annotated[str, msgspec.Meta(pattern=r"^https://")]
    year: int
    quoted_figure: Text


class BoundaryFactors(msgspec.Struct, forbid_unknown_fields=True):
    factor: Annotated[list[BoundaryFactor], msgspec.Meta(min_length=1)]


class ValidityCode(msgspec.Struct, forbid_unknown_fields=True):
    """A [[validity]] of index_v2.toml, its fields in the validity_codes table's column order."""
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z]+(_[a-z]+)*$")]
    applies_to: Literal["all", "token"]
    threshold: float
    test: Text
    why: Text


class EnergyClass(msgspec.Struct, forbid_unknown_fields=True):
    letter: Annotated[str, msgspec.Meta(pattern=r"^[A-Z]$")]
    below: Annotated[float, msgspec.Meta(gt=0)] | None = None


class EnergyClassScale(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where the energy class scale comes from, and the boundary whose figures its letters are read at."""
    boundary: Literal["gpu_only", "server", "facility"]
    source: Text


class IndexV2(msgspec.Struct, forbid_unknown_fields=True):
    validity: Annotated[list[ValidityCode], msgspec.Meta(min_length=1)]
    energy_class_scale: EnergyClassScale
    energy_class: Annotated[list[EnergyClass], msgspec.Meta(min_length=1)]


def energy_class_scale(path: Path = INDEX_V2) -> EnergyClassScale:
    """The energy class scale's source and boundary, as index_v2.toml declares them."""
    return read_toml(path, IndexV2).energy_class_scale


def load_index_v2(path: Path = INDEX_V2) -> tuple[list[tuple], list[tuple]]:
    """The validity_codes rows (with their position) and the energy_classes rows (letter, lower bound,
    upper bound, the scale's boundary) of an index_v2.toml: codes distinct; letters in order with rising
    bounds, only the last unbounded."""
    declared = read_toml(path, IndexV2)
    codes = [code.code for code in declared.validity]
    problems = [f"code {code}: declared more than once" for code in sorted({c for c in codes if codes.count(c) > 1})]
    bounds = [entry.below for entry in declared.energy_class]
    if None in bounds[:-1] or bounds[-1] is not None or bounds[:-1] != sorted(set(bounds[:-1])):
        problems.append("energy_class: upper bounds must rise, and only the last class has none")
    if problems:
        raise PipelineError(f"{path}: index version 2 declarations are not valid", problems)
    validity = [(position, *msgspec.structs.astuple(code)) for position, code in enumerate(declared.validity, 1)]
    classes = [(entry.letter, 0.0 if number == 0 else bounds[number - 1], entry.below,
                declared.energy_class_scale.boundary) for number, entry in enumerate(declared.energy_class)]
    return validity, classes


class EcologitsCoefficients(msgspec.Struct, forbid_unknown_fields=True):
    version: str
    source: str
    alpha: float
    beta: float
    gamma: float
    batch_size: int
    quantization_bits: int
    gpu_memory_gb: float
    memory_overhead: float


def load_audit_rules() -> list[tuple]:
    """The audit_rules table's rows: rule, table_name, severity, tolerance, direction, measure, why."""
    rules = read_toml(AUDIT_RULES, dict[str, AuditRule])
    for rule, fields in rules.items():
        if round(fields.tolerance, 6) != fields.tolerance:
            raise PipelineError(f"{AUDIT_RULES}: $.{rule}.tolerance: at most six decimals (audit_findings writes six)")
    return [(rule, f.table, f.severity, f.tolerance, f.direction, f.measure, f.why) for rule, f in rules.items()]


def load_latency_tiers(path: Path, metrics: dict[str, list[str]]
                       ) -> list[tuple[str, str | None, str, float | None, float | None]]:
    """(family, task, latency metric, limit in ms, limit in s) rows from a latency_tiers.toml layout, each
    metric one of its family's in `metrics` (the latency_metrics view): a token task's limits (inter-token
    latency) are in ms, a diffusion task's (batch latency) in s, each in the column of its unit."""
    declared = read_toml(path, LatencyTiers)
    rows, problems = [], []
    groups = [("token", None, declared.token),
              *(("diffusion", task, tiers) for task, tiers in declared.diffusion.items())]
    for family, task, limits in groups:
        for metric, values in limits.items():
            if metric not in metrics[family]:
                where = f"$.{family}{'.' + task if task else ''}.{metric}"
                problems.append(f"{where}: not a latency metric of {family} tasks ({', '.join(metrics[family])})")
            rows += [(family, task, metric, *((value, None) if family == "token" else (None, value)))
                     for value in sorted(set(values))]
    if problems:
        raise PipelineError(f"{path}: latency tiers are not valid", problems)
    return rows


def load_boundary_factors(path: Path = BOUNDARY_FACTORS) -> list[dict[str, object]]:
    """The [[factor]] rows of a boundary_factors.toml, checked strictly: every key present and no other,
    each of its type, distinct ids, either the three factors (of at least 1, low <= central <= high) or
    host_watts_per_gpu (the factor then derived per GPU by the view boundary_factors_by_gpu), and one
    central row per boundary."""
    rows = [msgspec.structs.asdict(factor) for factor in read_toml(path, BoundaryFactors).factor]
    problems = []
    for number, row in enumerate(rows):
        factors = [row["factor_low"], row["factor_central"], row["factor_high"]]
        if row["host_watts_per_gpu"] is not None:
            if factors != [None, None, None]:
                problems.append(f"$.factor[{number}]: host_watts_per_gpu derives the factors per GPU; "
                                "give no factor_low, factor_central or factor_high beside it")
        elif None in factors:
            problems.append(f"$.factor[{number}]: needs factor_low, factor_central and factor_high "
                            "(or host_watts_per_gpu)")
        elif not factors[0] <= factors[1] <= factors[2]:
            problems.append(f"$.factor[{number}]: factors must satisfy "
                            "1 <= factor_low <= factor_central <= factor_high")
    ids = [row["id"] for row in rows]
    problems += [f"id {name}: used by more than one factor" for name in sorted({i for i in ids if ids.count(i) > 1})]
    for boundary in ("server", "facility"):
        central = sum(row["boundary"] == boundary and row["central"] for row in rows)
        if central != 1:
            problems.append(f"boundary {boundary}: needs exactly one row with central = true, has {central}")
    if problems:
        raise PipelineError(f"{path}: boundary factors are not valid", problems)
    return rows


def load_reference_tables(connection: duckdb.DuckDBPyConnection, parameters: tuple,
                          latency_tiers: Path = LATENCY_TIERS) -> None:
    """The tables the build makes from its parameters and declarations rather than from a snapshot
    (schemas.REFERENCE_TABLES, declared in the field dictionary): the build parameters, GPU ratings, latency
    ceilings and tiers, audit rules, EcoLogits' coefficients, boundary factors. Each is validated as an
    ingested table is (its pandera schema); build() then publishes each as OUT/parquet/<table>/data.parquet
    so that the views can be run over the Parquet alone (Spark: pipeline/spark.py)."""
    from pipeline.validate import raise_failures, table_failures

    connection.execute(sql_object("latency_metrics").statement)
    metrics = dict(connection.execute("select family, list(latency_metric order by metric_order)"
                                      " from latency_metrics group by family").fetchall())
    ceilings = load_source_card().diffusion.default_batch_latency_ceiling_s
    rows = {
        "build_parameters": [parameters],
        "latency_tiers": load_latency_tiers(latency_tiers, metrics),
        "ecologits_coefficients": [msgspec.structs.astuple(read_toml(ECOLOGITS, EcologitsCoefficients))],
        "boundary_factors": [tuple(row.values()) for row in load_boundary_factors()],
        "gpu_ratings": sorted(RATED_BOARD_POWER_W.items()),
        "audit_rules": load_audit_rules(),
        "latency_ceilings": sorted(ceilings.items()),
    }
    rows["validity_codes"], rows["energy_classes"] = load_index_v2()
    tables = {table: _arrow_rows(table, rows[table]) for table in REFERENCE_TABLES}
    failures, _ = table_failures(tables)
    raise_failures(failures)
    for table, arrow in tables.items():
        _create_table(connection, table, arrow)


def _publish_reference_tables(connection: duckdb.DuckDBPyConnection, paths: Paths) -> None:
    """Write each reference table as Parquet beside the data tables, described as the ingested tables
    are; a file that would not change is left untouched."""
    for table in REFERENCE_TABLES:
        rows = connection.sql(f"select * from {table} order by all").to_arrow_table()
        buffer = pyarrow.BufferOutputStream()
        pq.write_table(rows.cast(described(table, rows.schema)), buffer, compression="zstd")
        write_bytes_atomic(paths.reference_parquet_path(table), buffer.getvalue().to_pybytes())


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
                fitted = _fitted(name, connection.sql(f"select * from {STORED[name][0]}(null)").to_arrow_table())
                connection.execute(f"create or replace table {name} as select * from fitted")
            elif STORED[name][1] == "snapshot":
                connection.execute(f"create or replace view {name} as select * from {STORED[name][0]}(null)")
            continue
        if name in present:
            continue
        try:
            connection.execute(sql_object(name).statement)
        except duckdb.Error as error:
            raise PipelineError(f"{sql_path(name)}: {error}") from None


# A view's or table macro's key in its header: the columns that tell its rows apart, one line, and those
# of them that may be null (a row without that part, as SQL's UNIQUE allows), e.g. "-- key: task, row_id".
KEY_LINE = re.compile(r"^-- key: (.*)$", re.MULTILINE)
NULL_IN_KEY_LINE = re.compile(r"^-- null in key: (.*)$", re.MULTILINE)
COLUMN_LIST = re.compile(r"\w+(?:, \w+)*")


@dataclass(frozen=True)
class Key:
    columns: tuple[str, ...]
    nullable: tuple[str, ...] = ()  # the key columns that may be null


def _header(name: str) -> str:
    return view_files()[name].read_text(encoding="utf-8").split("\ncreate ")[0]


@functools.cache
def view_key(name: str) -> Key | None:
    """A view's or table macro's key, from its header's `-- key:` line (and `-- null in key:`); None for a
    scalar macro, which returns a value. A view or table macro without one fails the build."""
    header = _header(name)
    found = {label: pattern.findall(header) for label, pattern in (("key", KEY_LINE), ("null in key", NULL_IN_KEY_LINE))}
    if sql_object(name).kind == "macro":
        if found["key"] or found["null in key"]:
            raise PipelineError(f"{sql_path(name)}: a scalar macro returns a value; its header declares no key")
        return None
    lists = {label: [COLUMN_LIST.fullmatch(text) for text in texts] for label, texts in found.items()}
    if len(found["key"]) != 1 or len(found["null in key"]) > 1 or not all(map(all, lists.values())):
        raise PipelineError(f"{sql_path(name)}: its header needs one '-- key: column, column, ...' line (and at"
                            " most one '-- null in key: column, ...' line naming some of them)")
    columns = tuple(found["key"][0].split(", "))
    nullable = tuple(found["null in key"][0].split(", ")) if found["null in key"] else ()
    if not set(nullable) <= set(columns):
        raise PipelineError(f"{sql_path(name)}: '-- null in key:' names columns not in its key: "
                            f"{', '.join(sorted(set(nullable) - set(columns)))}")
    return Key(columns, nullable)


def view_description(name: str) -> str:
    """A sql/ object's description from its header: what it holds (the first comment lines), its grain
    (a label's indented comment lines continue it; a scalar macro's grain is a value) and its key."""
    scalar = {"grain": ["(a value)"]} if sql_object(name).kind == "macro" else {}
    fields: dict[str, list[str]] = {"what": [], **scalar}
    current = "what"
    for line in _header(name).splitlines():
        text = line.removeprefix("--").strip()
        label, _, rest = text.partition(":")
        if label == "grain":
            current = label
            fields[current] = [rest.strip()]
        elif current == "what" or (current == "grain" and line.startswith("--  ")):
            fields[current].append(text)
        else:
            break
    what = " ".join(fields["what"]).split(":", 1)[1].strip()
    key = view_key(name)
    key_text = "—" if key is None else f"({', '.join(key.columns)})"
    return f"{what[0].upper()}{what[1:]} Grain: {' '.join(fields['grain'])}. Key: {key_text}."


# Tables stored beside the ingested ones, one Parquet file per snapshot (or per consecutive pair,
# under the newer snapshot) and loaded as tables: each unit is computed once, by its table macro,
# when it first appears or its inputs change, so a refresh costs the same whatever the history's
# length. table -> (table macro, "snapshot" or "pair").
STORED = {
    "best_configuration_history": ("best_configurations_in", "snapshot"),
    "configuration_changes": ("configuration_diff", "pair"),
    "index_changes": ("index_diff", "pair"),
    "efficiency_curve_fits": ("efficiency_curve_points_in", "snapshot"),
}
# Stored tables whose rows Python computes from their macro's rows: fitting is not SQL's job. The module
# is part of what a stored unit is computed from, and is imported (with scipy) only when a unit is stale.
FITTED = {"efficiency_curve_fits": "pipeline.fits"}
# What a stored unit's rows depend on besides the build parameters and the SQL.
STORED_INPUT_TABLES = ("token_configurations", "diffusion_configurations")


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


def with_order_column(table: str, rows: pyarrow.Table, ordered_at: datetime) -> pyarrow.Table:
    """The rows of one of a table's files with its order column (order_column) after the folder's key
    column, described as the field dictionary describes it."""
    column = order_column(table)
    field = pyarrow.field(column, pyarrow.timestamp("us", tz="UTC"), nullable=False).with_metadata(
        {"description": dictionary.column(table, column).description})
    return rows.add_column(rows.schema.get_field_index(hive_key(table)) + 1, field,
                           pyarrow.repeat(pyarrow.scalar(ordered_at, field.type), rows.num_rows))


def _fitted(table: str, rows: pyarrow.Table) -> pyarrow.Table:
    """A fitted stored table's rows from its macro's rows (FITTED)."""
    return importlib.import_module(FITTED[table]).fit_curves(rows)


def _store(connection: duckdb.DuckDBPyConnection, paths: Paths, table: str, notices: list[str],
           fitting_seconds: list[float]) -> None:
    """Compute the stored rows of every unit (snapshot or consecutive pair) whose file is missing,
    stale or unreadable, drop those no longer wanted, and load them all as the table; each fitted unit's
    seconds of fitting are appended to `fitting_seconds`."""
    macro, kind = STORED[table]
    arity = 1 if kind == "snapshot" else 2
    call = f"{macro}({', '.join('?' * arity)})"
    parameters = connection.execute(
        "select itl_deadline_ms, change_relative_tolerance from build_parameters").fetchone()
    code = [Path(importlib.util.find_spec(FITTED[table]).origin)] if table in FITTED else []
    context = files_sha256([*view_files().values(), SOURCE_CARD, *code], SQL_DIR.parent, repr(parameters))
    history = connection.execute(
        "select previous_snapshot_id, snapshot_id from snapshot_history order by position").fetchall()
    units = [pair[-arity:] for pair in history if None not in pair[-arity:]]
    ordered_at = {snapshot_id: snapshot_ordered_at(commit_time, retrieved) for snapshot_id, commit_time, retrieved
                  in connection.execute("select snapshot_id, commit_time, retrieved from snapshots").fetchall()}
    stale = {}
    for unit in units:
        # A digest of what the unit is computed from: its snapshots' files (their content: the stored file
        # embeds it, so a file's inode or time would make the same input give other bytes), the build
        # parameters and the SQL.
        signatures = [f"{input_table}/{snapshot_id}:{file_sha256(paths.parquet_path(input_table, snapshot_id))}"
                      for snapshot_id in unit for input_table in STORED_INPUT_TABLES]
        inputs = data_sha256("\n".join([context, *signatures]).encode()).encode()
        if _stored_inputs(paths.parquet_path(table, unit[-1]), notices) != inputs:
            stale[unit] = inputs
    with progress(len(stale), f"build: {table}", unit="snapshot") as bar:
        for unit, inputs in stale.items():
            rows = connection.sql(f"select * from {call} order by all", params=list(unit)).to_arrow_table()
            if table in FITTED:
                started = time.perf_counter()
                rows = _fitted(table, rows)
                fitting_seconds.append(time.perf_counter() - started)
            rows = with_order_column(table, rows, ordered_at[unit[-1]])
            schema = for_readers(rows.schema, hive_key(table))
            with atomic_path(paths.parquet_path(table, unit[-1])) as tmp:
                pq.write_table(rows.cast(schema.with_metadata({**(schema.metadata or {}), b"inputs": inputs})), tmp,
                               compression="zstd")
            bar.update(1)
    # Units gone from the history go, and so do folders of an earlier layout (another key), which a hive
    # reader would read as a second partition column.
    wanted = {f"{hive_key(table)}={unit[-1]}" for unit in units}
    for folder in (paths.parquet_dir / table).glob("*=*"):
        if folder.name not in wanted:
            shutil.rmtree(folder)
    files = [str(path) for path in paths.parquet_files(table).values()]
    if not files and table in FITTED:
        empty = _fitted(table, connection.sql(f"select * from {call} limit 0", params=[""] * arity).to_arrow_table())
        connection.execute(f"create or replace table {table} as select * from empty")
        return
    read = f"* exclude ({order_column(table)}) from read_parquet(?, hive_partitioning = false)"
    connection.execute(f"create or replace table {table} as select {read if files else f'* from {call} limit 0'}",
                       [files] if files else [""] * arity)


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
        return f"{FITTED[table].replace('.', '/')}.py over {sql_path(STORED[table][0])}"
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
    have defaults, so the call gives as many as bind, from all of them down."""
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
    # Created empty first, so that it lists itself.
    _create_table(connection, "data_dictionary", [])
    catalog = connection.execute(
        "select table_name, 'table', comment from duckdb_tables() where schema_name = 'main' and not internal"
        " union all select view_name, 'view', comment from duckdb_views() where schema_name = 'main' and not internal"
    ).fetchall()
    objects = {name: kind for name, kind, _ in catalog}
    descriptions = {name: view_description(name) if kind == "view" else dictionary.table_description(name)
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
    for name, position, column, data_type in _table_macro_columns(connection):
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
    _insert_rows(connection, "data_dictionary", rows)


def _hold_memory(connection: duckdb.DuckDBPyConnection) -> None:
    """Lower the connection's memory limit to BUILD_MEMORY_BYTES where DuckDB's own default is higher."""
    (default,) = connection.execute("select current_setting('memory_limit')").fetchall()[0]
    if BUILD_MEMORY_BYTES < (size_bytes(default) or BUILD_MEMORY_BYTES + 1):
        connection.execute(f"set memory_limit = '{BUILD_MEMORY_BYTES}B'")


def build(
    paths: Paths, itl_deadline_ms: float, snapshot_id: str | None = None, full: bool = False,
    latency_tiers: Path = LATENCY_TIERS, retrieved: str | None = None,
) -> BuildResult:
    """Build the database; the index is built from `snapshot_id`, by default the newest snapshot.
    Unless `full`, the published database is copied and brought up to date when this code built it.
    `retrieved` is the index snapshot's retrieval date the database states (data_version, index_history)
    and the export writes; by default the day the fetch first retrieved it."""
    if not (itl_deadline_ms > 0):
        raise PipelineError(f"ITL deadline must be a positive number of milliseconds, got {itl_deadline_ms}")
    paths.build_root.mkdir(parents=True, exist_ok=True)
    staging = paths.build_root / f".{paths.database.name}.{os.getpid()}.tmp"
    leftovers = (staging, Path(f"{staging}.wal"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    notices: list[str] = []
    fitting_seconds: list[float] = []
    try:
        loaded = {} if full else _reusable_database(paths, staging)
        storage = {"storage_compatibility_version": f"v{OLDEST_SUPPORTED_DUCKDB}"}
        with connect(str(staging), config=storage) as connection:
            _hold_memory(connection)
            _load_tables(connection, paths, loaded)
            commits = dict(connection.execute("select snapshot_id, commit from snapshots order by snapshot_id").fetchall())
            ingested = list(commits)
            snapshot_id = snapshot_id and snapshot_id_for(snapshot_id, commits)
            if snapshot_id is not None and snapshot_id not in ingested:
                raise PipelineError(f"snapshot {shown(snapshot_id)} is not in the Parquet tables; "
                                    f"ingested: {', '.join(ingested)}")
            parameters = (snapshot_id, itl_deadline_ms, CHANGE_RELATIVE_TOLERANCE, __version__, retrieved)
            load_reference_tables(connection, parameters, latency_tiers)
            _publish_reference_tables(connection, paths)
            # A copy of a database this code built (loaded) holds its views and macros as this code makes them.
            present = {name for (name,) in connection.execute(
                "select view_name from duckdb_views() where schema_name = 'main' and not internal union all"
                " select function_name from duckdb_functions() where schema_name = 'main' and not internal"
                " and function_type in ('macro', 'table_macro')").fetchall()} if loaded else set()
            create_views(connection, lambda table: _store(connection, paths, table, notices, fitting_seconds), present)
            describe_objects(connection)
            (index_snapshot,) = connection.execute("select snapshot_id from index_snapshot").fetchone()
            connection.execute("checkpoint")
        os.replace(staging, paths.database)
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
    return BuildResult(list(view_files()), index_snapshot, appended=bool(loaded), notices=tuple(notices),
                       fitting_seconds=tuple(fitting_seconds))
