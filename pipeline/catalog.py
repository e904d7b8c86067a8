"""The database's catalogue: every table (empty), view and macro with its description and the
data_dictionary. It depends on this code and the data tables' column types alone, never on a snapshot's
rows, so a fresh build starts from a copy of it, kept in the catalogue cache (settings.CATALOG_CACHE)
under a name made of what it depends on, and only loads rows into it.

Making it costs a 1× refresh about 0.6 s of its 3.4 s (binding 60 views through the layers beneath
them, 1,070 COMMENT statements at about 0.25 ms each, binding each table macro for data_dictionary);
copying it, a few milliseconds (docs/performance.md). A cache that cannot be written or read is only a
cache: the build makes the catalogue in place and carries on."""

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import duckdb

from pipeline.database import connect
from pipeline.declared_tables import create_table
from pipeline.descriptions import describe_objects
from pipeline.files import atomic_path
from pipeline.fingerprint import data_sha256
from pipeline.paths import code_digest, order_column
from pipeline.settings import catalog_cache_dir
from pipeline.stored_tables import store_empty
from pipeline.views import create_views
from schemas import REFERENCE_TABLES, TABLE_NAMES

# Catalogues of other versions of the code are removed past this many, the least recently used first: a
# checkout's cache holds the one its code uses and a few it may switch back to.
KEPT_CATALOGUES = 8


def parquet_read(table: str) -> str:
    """The query that reads a data table's Parquet files ($files) as the database holds them: without the
    files' order column, which is for their readers (the database's order is snapshot_history's)."""
    return (f"select * exclude ({order_column(table)})"
            " from read_parquet($files, union_by_name = true, hive_partitioning = false)")


def _key(connection: duckdb.DuckDBPyConnection, files: Mapping[str, list[str]], storage: Mapping[str, str]) -> str:
    """What the catalogue depends on: the code (with the libraries' versions), the storage format asked
    for, and each data table's columns as its files give them (files written by earlier code may have
    other types: their catalogue is another)."""
    columns = [repr(connection.execute(f"describe {parquet_read(table)}", {"files": files[table]}).fetchall())
               for table in TABLE_NAMES]
    return data_sha256("\n".join([code_digest(), repr(sorted(storage.items())), *columns]).encode())


def _make(connection: duckdb.DuckDBPyConnection, files: Mapping[str, list[str]]) -> None:
    """The catalogue on an empty database: the tables without rows, then the views, macros and stored
    tables (empty) in their order, then every description."""
    for table in TABLE_NAMES:
        connection.execute(f"create table {table} as {parquet_read(table)} limit 0", {"files": files[table]})
    for table in ("build_inputs", *REFERENCE_TABLES):
        create_table(connection, table, [])
    create_views(connection, lambda table: store_empty(connection, table))
    describe_objects(connection)
    connection.execute("checkpoint")


def _keep(built: Path, cached: Path) -> None:
    """Copy the catalogue just made into the cache, whole or not at all, and drop the least recently used
    beyond KEPT_CATALOGUES."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(cached) as tmp:
        shutil.copyfile(built, tmp)
    others = sorted(cached.parent.glob("catalogue-*.duckdb"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in others[KEPT_CATALOGUES:]:
        stale.unlink(missing_ok=True)


def open_catalogue(staging: Path, files: Mapping[str, list[str]], storage: Mapping[str, str]) -> duckdb.DuckDBPyConnection:
    """A connection to `staging` (absent before) holding the catalogue: a copy of the cached one when there
    is one for this code and these files' columns (and it opens), else the catalogue made here and kept in
    the cache when it can be."""
    folder = catalog_cache_dir()
    with connect() as memory:
        cached = folder / f"catalogue-{_key(memory, files, storage)}.duckdb" if folder else None
    if cached is not None and cached.is_file():
        try:
            shutil.copyfile(cached, staging)
            connection = connect(str(staging), config=dict(storage))
            os.utime(cached)  # recently used: kept when older ones are dropped
            return connection
        except (OSError, duckdb.Error):  # unreadable or damaged: only a cache, made again below
            staging.unlink(missing_ok=True)
            Path(f"{staging}.wal").unlink(missing_ok=True)
    connection = connect(str(staging), config=dict(storage))
    try:
        _make(connection, files)
    except BaseException:
        connection.close()
        raise
    if cached is not None:
        try:
            _keep(staging, cached)
        except OSError:
            pass  # the build goes on without the cache; the next one makes the catalogue again
    return connection
