"""Build: load the Parquet tables into a DuckDB database, add the reference tables (reference_tables.py),
the views, macros and stored tables (views.py, stored_tables.py) and their descriptions
(descriptions.py), and publish it by rename. A copy of the published database, when this code built
it, is brought up to date instead of loading every snapshot again; otherwise the build starts from the
catalogue (catalog.py: the same database without rows)."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipeline import __version__
from pipeline.catalog import open_catalogue, parquet_read
from pipeline.database import connect
from pipeline.declared_tables import create_table
from pipeline.descriptions import describe_objects
from pipeline.errors import NEXT_STEP, PipelineError, shown, snapshot_id_for
from pipeline.paths import LATENCY_TIERS, Paths, code_digest
from pipeline.reference_tables import load_reference_tables, publish_reference_tables
from pipeline.settings import size_bytes
from pipeline.sql_objects import view_files
from pipeline.stored_tables import store
from pipeline.views import create_views
from schemas import TABLE_NAMES

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


@dataclass(frozen=True)
class BuildResult:
    views: list[str]
    index_snapshot: str  # the snapshot the index is built from
    appended: bool = False
    notices: tuple[str, ...] = ()
    # Seconds spent fitting (stored_tables.FITTED), one figure per snapshot fitted: the refresh
    # reports it as part of its build step, and make bench reads it there.
    fitting_seconds: tuple[float, ...] = ()


def _signature(path: Path) -> str:
    """What a re-ingest changes: it replaces the file, so its inode and mtime change."""
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def _parquet_files(paths: Paths) -> dict[tuple[str, str], Path]:
    """Every data table's file of every snapshot ingested, by (table, snapshot)."""
    files = {(table, snapshot): path for table in TABLE_NAMES for snapshot, path in paths.parquet_files(table).items()}
    for table in TABLE_NAMES:
        if not any(key[0] == table for key in files):
            raise PipelineError(f"no snapshot has been ingested into table {table} yet; {NEXT_STEP}")
    return files


def _load_tables(connection: duckdb.DuckDBPyConnection, files: dict[tuple[str, str], Path],
                 loaded: dict[tuple[str, str], str]) -> None:
    """Bring the data tables up to the Parquet files: in a catalogue, whose tables are empty, all of them;
    in a copy of the published database (`loaded` says what it holds), the snapshots added or re-ingested."""
    signatures = {key: _signature(path) for key, path in files.items()}
    for table in TABLE_NAMES:
        changed = sorted(snapshot for name, snapshot in loaded.keys() | signatures.keys()
                         if name == table and loaded.get((name, snapshot)) != signatures.get((name, snapshot)))
        new_files = [str(files[table, snapshot]) for snapshot in changed if (table, snapshot) in files]
        if changed and loaded:
            connection.execute(f"delete from {table} where list_contains($ids, snapshot_id)", {"ids": changed})
        if new_files:
            connection.execute(f"insert into {table} by name {parquet_read(table)}", {"files": new_files})
    code = code_digest()
    create_table(connection, "build_inputs", [(*key, signature, code) for key, signature in sorted(signatures.items())])


def _reusable_database(paths: Paths, staging: Path) -> dict[tuple[str, str], str] | None:
    """Copy the published database to `staging` when it was built by this code, and say which
    Parquet files it holds; otherwise leave `staging` absent and return None.

    Appending to a copy costs the copy (a fraction of a second at 200 snapshots) and the new rows;
    reloading every snapshot's Parquet costs time that grows with the history (8.6 s at 200)."""
    published = Paths(paths.out).database
    try:
        with connect(str(published), read_only=True) as connection:
            rows = connection.execute("select table_name, snapshot_id, signature, code from build_inputs").fetchall()
    except duckdb.Error:  # none published, or not readable
        return None
    if {row[3] for row in rows} != {code_digest()}:
        return None
    shutil.copyfile(published, staging)
    return {(table, snapshot): signature for table, snapshot, signature, _ in rows}


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
        files = _parquet_files(paths)
        storage = {"storage_compatibility_version": f"v{OLDEST_SUPPORTED_DUCKDB}"}
        loaded = None if full else _reusable_database(paths, staging)
        if loaded is None:
            opened = open_catalogue(staging, {table: [str(path) for (name, _), path in sorted(files.items())
                                                      if name == table] for table in TABLE_NAMES}, storage)
            loaded = {}
        else:
            opened = connect(str(staging), config=storage)
        with opened as connection:
            _hold_memory(connection)
            _load_tables(connection, files, loaded)
            commits = dict(connection.execute("select snapshot_id, commit from snapshots order by snapshot_id").fetchall())
            ingested = list(commits)
            snapshot_id = snapshot_id and snapshot_id_for(snapshot_id, commits)
            if snapshot_id is not None and snapshot_id not in ingested:
                raise PipelineError(f"snapshot {shown(snapshot_id)} is not in the Parquet tables; "
                                    f"ingested: {', '.join(ingested)}")
            parameters = (snapshot_id, itl_deadline_ms, CHANGE_RELATIVE_TOLERANCE, __version__, retrieved)
            load_reference_tables(connection, parameters, latency_tiers)
            publish_reference_tables(connection, paths)
            # A catalogue or a copy of a database this code built holds its views and macros as this code makes them.
            present = {name for (name,) in connection.execute(
                "select view_name from duckdb_views() where schema_name = 'main' and not internal union all"
                " select function_name from duckdb_functions() where schema_name = 'main' and not internal"
                " and function_type in ('macro', 'table_macro')").fetchall()}
            create_views(connection, lambda table: store(connection, paths, table, notices, fitting_seconds), present)
            describe_objects(connection)
            (index_snapshot,) = connection.execute("select snapshot_id from index_snapshot").fetchone()
            connection.execute("checkpoint")
        os.replace(staging, paths.database)
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
    return BuildResult(list(view_files()), index_snapshot, appended=bool(loaded), notices=tuple(notices),
                       fitting_seconds=tuple(fitting_seconds))
