"""The catalogue a fresh build starts from (pipeline/catalog.py): a build from the cached copy holds what a
build that made it holds, column by column and row by row; a damaged or unwritable cache, or none, only
costs the time of making it."""

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import SEED_RETRIEVED, copy_build

from pipeline.build import build
from pipeline.catalog import _key
from pipeline.database import connect
from pipeline.paths import Paths
from pipeline.settings import CATALOG_CACHE, ITL_DEADLINE_MS
from schemas import TABLE_NAMES

# What a reader of the database sees of its objects: every column with its type and description, every
# table's and view's description, and the macros.
CATALOG_QUERIES = (
    "select table_name, column_name, column_index, data_type, comment from duckdb_columns()"
    " where schema_name = 'main' and not internal order by all",
    "select table_name, comment from duckdb_tables() where schema_name = 'main' and not internal order by all",
    "select view_name, comment from duckdb_views() where schema_name = 'main' and not internal order by all",
    "select function_name, function_type, parameters from duckdb_functions()"
    " where schema_name = 'main' and not internal order by all",
    "select * from data_dictionary order by all",
)


def database_content(database: Path) -> dict[str, object]:
    """The catalogue as a reader sees it, and every table's and view's rows but build_inputs' (which names
    the files of one output folder)."""
    with duckdb.connect(str(database), read_only=True) as connection:
        content: dict[str, object] = {query: connection.execute(query).fetchall() for query in CATALOG_QUERIES}
        names = [name for (name,) in connection.execute(
            "select table_name from duckdb_tables() where schema_name = 'main' and not internal"
            " union all select view_name from duckdb_views() where schema_name = 'main' and not internal"
        ).fetchall() if name != "build_inputs"]
        for name in names:
            content[name] = connection.execute(f"select * from {name} order by all").fetchall()
    return content


def built_copy(newest_build: Paths, out: Path) -> Path:
    """A copy of the shared build, built again from its Parquet files alone (no published database of
    this code's to start from): the database it publishes."""
    copied = Paths(copy_build(newest_build, out))
    build(copied, ITL_DEADLINE_MS.default, full=True, retrieved=SEED_RETRIEVED)
    return copied.database


def test_a_build_from_the_cached_catalogue_holds_what_a_build_making_it_holds(
        newest_build: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(CATALOG_CACHE.name, str(cache))
    made = built_copy(newest_build, tmp_path / "made")
    kept = sorted(cache.glob("catalogue-*.duckdb"))
    assert len(kept) == 1
    with duckdb.connect(str(kept[0]), read_only=True) as connection:
        assert all(connection.execute(f"select count(*) from {table}").fetchone() == (0,)
                   for table in TABLE_NAMES), "the catalogue holds no snapshot's rows"
    copied = built_copy(newest_build, tmp_path / "copied")
    assert sorted(cache.glob("catalogue-*.duckdb")) == kept
    expected = database_content(made)
    assert len(expected) > 60
    assert database_content(copied) == expected
    assert database_content(newest_build.database) == expected, "as the refresh that made the shared build"


@pytest.mark.sweep  # variants of the cache's damage, each making the catalogue again
def test_a_damaged_unwritable_or_no_cache_only_costs_making_the_catalogue(
        newest_build: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        expected = [connection.execute(query).fetchall() for query in CATALOG_QUERIES]

    def catalogue_of(database: Path) -> list[object]:
        with duckdb.connect(str(database), read_only=True) as connection:
            return [connection.execute(query).fetchall() for query in CATALOG_QUERIES]

    cache = tmp_path / "cache"
    monkeypatch.setenv(CATALOG_CACHE.name, str(cache))
    built_copy(newest_build, tmp_path / "first")
    (kept,) = cache.glob("catalogue-*.duckdb")
    kept.write_bytes(b"not a database" * 1000)
    assert catalogue_of(built_copy(newest_build, tmp_path / "after-damage")) == expected
    with duckdb.connect(str(kept), read_only=True):  # made again in its place
        pass
    blocked = tmp_path / "a-file"
    blocked.write_text("a file where the cache's folder would be\n")
    monkeypatch.setenv(CATALOG_CACHE.name, str(blocked / "cache"))
    assert catalogue_of(built_copy(newest_build, tmp_path / "unwritable")) == expected
    monkeypatch.setenv(CATALOG_CACHE.name, "off")
    assert catalogue_of(built_copy(newest_build, tmp_path / "off")) == expected
    assert list(cache.glob("catalogue-*.duckdb")) == [kept]


def test_the_catalogue_is_another_when_the_data_tables_columns_differ(newest_build: Paths, tmp_path: Path) -> None:
    files = {table: [str(path) for path in newest_build.parquet_files(table).values()] for table in TABLE_NAMES}
    storage = {"storage_compatibility_version": "v1.1.0"}
    with connect() as memory:
        key = _key(memory, files, storage)
        assert _key(memory, files, storage) == key
        assert _key(memory, files, {"storage_compatibility_version": "v1.2.0"}) != key
        table = TABLE_NAMES[0]
        narrower = tmp_path / "narrower.parquet"
        rows = pq.read_table(files[table][0])
        pq.write_table(rows.drop_columns([rows.column_names[-1]]), narrower)
        assert _key(memory, {**files, table: [str(narrower)]}, storage) != key
