"""Tables stored beside the ingested ones, one Parquet file per snapshot (or per consecutive pair, under
the newer snapshot) and loaded as tables: each unit is computed once, by its table macro, when it first
appears or its inputs change, so a refresh costs the same whatever the history's length. Each file says
what it was computed from (a digest in its metadata); a file that is missing, stale or unreadable is
computed again."""

import inspect
import shutil
import time
from pathlib import Path

import duckdb
import pyarrow
import pyarrow.parquet as pq

from pipeline.archive import snapshot_ordered_at
from pipeline.database import has_table
from pipeline.declared_tables import with_order_column
from pipeline.files import atomic_path
from pipeline.fingerprint import data_sha256, file_sha256, files_sha256
from pipeline.fits import fit_curves
from pipeline.paths import SOURCE_CARD, SQL_DIR, Paths, hive_key, order_column
from pipeline.progress import progress
from pipeline.sql_objects import view_files
from schemas import for_readers

# table -> (table macro, "snapshot" or "pair").
STORED = {
    "best_configuration_history": ("best_configurations_in", "snapshot"),
    "configuration_changes": ("configuration_diff", "pair"),
    "index_changes": ("index_diff", "pair"),
    "efficiency_curve_fits": ("efficiency_curve_points_in", "snapshot"),
}
# Stored tables whose rows Python computes from their macro's rows: fitting is not SQL's job. The
# function's file is part of what a stored unit is computed from.
FITTED = {"efficiency_curve_fits": fit_curves}
# What a stored unit's rows depend on besides the build parameters and the SQL.
STORED_INPUT_TABLES = ("token_configurations", "diffusion_configurations")


def fitted_code(table: str) -> Path:
    """The file of the function that computes a fitted table's rows (FITTED)."""
    return Path(inspect.getfile(FITTED[table]))


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


def store(connection: duckdb.DuckDBPyConnection, paths: Paths, table: str, notices: list[str],
          fitting_seconds: list[float]) -> None:
    """Compute the stored rows of every unit (snapshot or consecutive pair) whose file is missing,
    stale or unreadable, drop those no longer wanted, and load them all as the table; each fitted unit's
    seconds of fitting are appended to `fitting_seconds`."""
    macro, kind = STORED[table]
    arity = 1 if kind == "snapshot" else 2
    call = f"{macro}({', '.join('?' * arity)})"
    parameters = connection.execute(
        "select itl_deadline_ms, change_relative_tolerance from build_parameters").fetchone()
    code = [fitted_code(table)] if table in FITTED else []
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
                rows = FITTED[table](rows)
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
    if not files:
        store_empty(connection, table)
        return
    read = f"select * exclude ({order_column(table)}) from read_parquet(?, hive_partitioning = false)"
    if has_table(connection, table):  # a catalogue's or a copied database's: its descriptions kept
        connection.execute(f"delete from {table}")
        connection.execute(f"insert into {table} by name {read}", [files])
    else:
        connection.execute(f"create table {table} as {read}", [files])


def store_empty(connection: duckdb.DuckDBPyConnection, table: str) -> None:
    """A stored table without rows, its columns as its macro (and for a fitted table, its function) gives them."""
    macro, kind = STORED[table]
    arity = 1 if kind == "snapshot" else 2
    call, parameters = f"{macro}({', '.join('?' * arity)})", [""] * arity
    if table in FITTED:
        empty = FITTED[table](connection.sql(f"select * from {call} limit 0", params=parameters).to_arrow_table())
        connection.execute(f"create or replace table {table} as select * from empty")
    else:
        connection.execute(f"create or replace table {table} as select * from {call} limit 0", parameters)
