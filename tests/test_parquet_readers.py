"""Every table folder under OUT/parquet reads as one dataset in pandas, pyarrow, polars, DuckDB and Spark
with their defaults, with the snapshot column once, the database's rows and the order column that puts
them in the history's order; pandas keeps integers that may be null as integers (docs/querying.md, "The
Parquet files as one dataset")."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas
import pyarrow
import pyarrow.parquet as pq
import pytest
from test_spark import SPARK_PYTHON

from conftest import SEED_AS_OF, SEED_RETRIEVED, UPSTREAM, cli, copy_build
from pipeline.paths import Paths, order_column
from pipeline.publish import ORDERED_FOR_READERS, _record_files


def _folders(build: Paths) -> list[Path]:
    folders = sorted(path for path in build.parquet_dir.iterdir() if path.is_dir())
    assert len(folders) >= 18, [path.name for path in folders]
    return folders


def _file_columns(connection: duckdb.DuckDBPyConnection, folder: Path, database: str = "db") -> list[str]:
    """The columns a table's files hold: the database table's, and in a folder of snapshots its order column."""
    columns = [name for (name,) in connection.execute(
        "select column_name from duckdb_columns() where database_name = ? and table_name = ? order by column_index",
        [database, folder.name]).fetchall()]
    return columns + [order_column(folder.name)] * any(folder.glob("*=*"))


def _differences(connection: duckdb.DuckDBPyConnection, table: str, frame: object) -> tuple[int, int, int]:
    """(rows read, rows the database has that the reader lacks, rows the reader has that the database
    lacks), comparing every column by name as the database types it."""
    connection.register("read_frame", frame)
    columns = ", ".join(f'"{name}"' for (name,) in connection.execute(
        "select column_name from duckdb_columns() where table_name = ? order by column_index", [table]).fetchall())
    typed = ", ".join(f'cast("{name}" as {data_type}) as "{name}"' for name, data_type in connection.execute(
        "select column_name, data_type from duckdb_columns() where table_name = ? order by column_index",
        [table]).fetchall())
    counts = connection.execute(
        f"select (select count(*) from read_frame),"
        f" (select count(*) from (select {columns} from db.{table} except all select {typed} from read_frame)),"
        f" (select count(*) from (select {typed} from read_frame except all select {columns} from db.{table}))"
    ).fetchall()[0]
    connection.unregister("read_frame")
    return counts


READERS = {
    "pandas": lambda folder: pandas.read_parquet(folder),
    "pyarrow": lambda folder: pq.read_table(folder),
    "polars": lambda folder: pytest.importorskip("polars").read_parquet(folder),
}


@pytest.mark.engines
@pytest.mark.parametrize("reader", sorted(READERS))
def test_each_folder_reads_with_the_readers_defaults_as_the_database_holds_it(history_build: Paths, reader: str) -> None:
    with duckdb.connect() as connection:
        connection.execute(f"attach '{history_build.database}' as db (read_only)")
        for folder in _folders(history_build):
            frame = READERS[reader](folder)
            assert sorted(frame.columns if reader != "pyarrow" else frame.column_names) == \
                sorted(_file_columns(connection, folder)), f"{reader} on {folder.name}"
            (rows,) = connection.execute(f"select count(*) from db.{folder.name}").fetchall()[0]
            assert _differences(connection, folder.name, frame) == (rows, 0, 0), f"{reader} on {folder.name}"


def test_duckdb_reads_each_folder_with_a_glob_and_no_options(history_build: Paths) -> None:
    with duckdb.connect() as connection:
        connection.execute(f"attach '{history_build.database}' as db (read_only)")
        for folder in _folders(history_build):
            read = duckdb.connect().sql(f"select * from read_parquet('{folder}/**/*.parquet')").to_arrow_table()
            assert _differences(connection, folder.name, read) == (
                connection.execute(f"select count(*) from db.{folder.name}").fetchall()[0][0], 0, 0), folder.name


OLDEST_ENGINE_READ = """
import json, sys, duckdb
print(json.dumps({folder: duckdb.sql(f"select count(*) from read_parquet('{folder}/**/*.parquet')").fetchall()[0][0]
                  for folder in sys.argv[1:]}))
"""


@pytest.mark.engines
def test_the_oldest_supported_duckdb_reads_each_folder_with_a_glob(history_build: Paths, tmp_path: Path) -> None:
    from test_clients import ENGINES, engine_python

    oldest = min(ENGINES, key=lambda version: tuple(map(int, version.split("."))))
    script = tmp_path / "read.py"
    script.write_text(OLDEST_ENGINE_READ)
    folders = _folders(history_build)
    ran = subprocess.run([str(engine_python(oldest)), str(script), *map(str, folders)], capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        expected = {str(folder): connection.execute(f"select count(*) from {folder.name}").fetchall()[0][0]
                    for folder in folders}
    assert json.loads(ran.stdout) == expected


@pytest.mark.engines
def test_pandas_keeps_integers_that_may_be_null_as_integers(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        integer_columns = connection.execute(
            "select table_name, column_name from duckdb_columns()"
            " where data_type in ('BIGINT', 'INTEGER') and table_name in (select table_name from duckdb_tables())"
        ).fetchall()
    folders = {folder.name: folder for folder in _folders(history_build)}
    frames = {table: pandas.read_parquet(folders[table]) for table in {table for table, _ in integer_columns}
              if table in folders}
    floats = [(table, column, str(frames[table][column].dtype)) for table, column in integer_columns
              if table in frames and not str(frames[table][column].dtype).lower().startswith("int")]
    assert floats == []
    # Null for videos, a number for images.
    height = frames["diffusion_configurations"]["image_height"]
    assert str(height.dtype) == "Int64" and height.isna().any() and height.notna().any()


def test_the_snapshot_column_is_there_once_and_agrees_with_its_folder(history_build: Paths) -> None:
    folder = history_build.parquet_dir / "index_changes"
    table = pq.read_table(folder)
    assert table.column_names.count("newer_snapshot_id") == 1
    assert pyarrow.types.is_dictionary(table.schema.field("newer_snapshot_id").type)
    for path in sorted(history_build.parquet_dir.glob("*/*=*/*.parquet")):
        key, _, value = path.parent.name.partition("=")
        assert set(pq.read_table(path, columns=[key]).column(key).to_pylist()) <= {value}, path


SPARK_READ = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
out = {}
for folder in sys.argv[1:]:
    frame = spark.read.parquet(folder)
    out[folder] = {"columns": frame.columns, "rows": frame.count(),
                   "types": {f.name: f.dataType.simpleString() for f in frame.schema.fields}}
spark.stop()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_spark_reads_each_folder_with_its_defaults(history_build: Paths, tmp_path: Path) -> None:
    if not SPARK_PYTHON.is_file():
        pytest.skip(f"{SPARK_PYTHON} is missing: 'make test-all' installs Spark")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark")
    script = tmp_path / "read.py"
    script.write_text(SPARK_READ)
    folders = _folders(history_build)
    ran = subprocess.run([str(SPARK_PYTHON), str(script), *map(str, folders)], capture_output=True, text=True,
                         timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    read = json.loads(ran.stdout.strip().splitlines()[-1])
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        for folder in folders:
            got = read[str(folder)]
            assert sorted(got["columns"]) == sorted(_file_columns(connection, folder, "energy_index")), folder.name
            assert got["rows"] == connection.execute(f"select count(*) from {folder.name}").fetchall()[0][0], folder.name
            integers = connection.execute("select column_name from duckdb_columns() where table_name = ?"
                                          " and data_type = 'BIGINT'", [folder.name]).fetchall()
            assert all(got["types"][name] == "bigint" for (name,) in integers), folder.name


def test_the_next_publish_types_the_files_of_a_build_by_older_code(newest_build: Paths, tmp_path: Path) -> None:
    """Older code stored the folder's key column as plain text, which pandas cannot read beside the folder
    name; the next publish replaces those files by typed copies and leaves typed ones alone."""
    out = tmp_path / "out"
    shutil.copytree(newest_build.out, out, symlinks=True)
    generation = (out / "current").resolve()
    (generation / "typed-for-readers").unlink()  # as a generation of older code has none
    old = next(iter(Paths(out).parquet_files("token_configurations").values())).resolve()
    table = pq.read_table(old)
    plain = table.set_column(table.schema.get_field_index("snapshot_id"), "snapshot_id",
                             table["snapshot_id"].cast(pyarrow.string()))
    pq.write_table(plain.replace_schema_metadata({}), old)
    with pytest.raises(pyarrow.ArrowTypeError, match="snapshot_id has incompatible types"):
        pandas.read_parquet(out / "parquet" / "token_configurations")
    untouched = next(iter(Paths(out).parquet_files("models").values())).resolve().stat().st_ino
    built = subprocess.run([str(Path(sys.executable).with_name("energy-index")), "build", "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    frame = pandas.read_parquet(out / "parquet" / "token_configurations")
    assert len(frame) == table.num_rows and str(frame["max_num_batched_tokens"].dtype) == "Int64"
    assert next(iter(Paths(out).parquet_files("models").values())).resolve().stat().st_ino == untouched
    assert ((out / "current").resolve() / "typed-for-readers").is_file()


def _history_order(build: Paths) -> list[str]:
    with duckdb.connect(str(build.database), read_only=True) as connection:
        return [s for (s,) in connection.execute("select snapshot_id from snapshot_history order by position").fetchall()]


def test_the_documented_pandas_recipe_puts_the_rows_in_commit_order(history_build: Paths) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "querying.md").read_text(encoding="utf-8")
    (recipe,) = [block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "snapshot_ordered_at" in block]
    namespace: dict = {}
    exec(recipe.replace('"build/parquet/', f'"{history_build.parquet_dir}/'), namespace)
    rows = namespace["rows"]
    # Read as it is, the category is alphabetical: 2689bff before 9fa07d1, committed after it.
    alphabetical = list(pandas.read_parquet(history_build.parquet_dir / "token_configurations")["snapshot_id"]
                        .cat.categories)
    assert alphabetical.index("2025-11-30-2689bff") < alphabetical.index("2025-11-30-9fa07d1")
    by_position = _history_order(history_build)
    assert len(by_position) == 11
    assert by_position.index("2025-11-30-9fa07d1") < by_position.index("2025-11-30-2689bff")
    assert list(rows["snapshot_id"].astype(str).unique()) == by_position
    assert list(rows["snapshot_id"].cat.categories) == by_position and rows["snapshot_id"].cat.ordered
    assert list(rows.groupby("snapshot_id", observed=True).size().index) == by_position


def test_every_folder_of_snapshots_sorts_into_the_history_order_by_its_order_column(history_build: Paths) -> None:
    by_position = _history_order(history_build)
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        commit_times = dict(connection.execute("select snapshot_id, commit_time from snapshots").fetchall())
    for folder in _folders(history_build):
        if not any(folder.glob("*=*")):
            continue  # a reference table: one file
        key, order = next(folder.glob("*=*")).name.partition("=")[0], order_column(folder.name)
        frame = pandas.read_parquet(folder, engine="pyarrow")
        assert str(frame[order].dtype) == "datetime64[us, UTC]", folder.name
        # Each snapshot's rows hold its commit time: every one of the eleven has one.
        held = frame[[key, order]].drop_duplicates()
        assert len(held) == held[key].nunique() and all(
            when == pandas.Timestamp(commit_times[str(snapshot)]) for snapshot, when in held.itertuples(index=False)), \
            folder.name
        ordered = list(frame.sort_values([order, key], kind="stable")[key].astype(str).unique())
        assert ordered == [s for s in by_position if s in ordered], folder.name


def test_a_snapshot_without_a_commit_time_is_placed_at_midnight_utc_of_its_retrieval(
        undated_refresh: tuple[Path, Path, str]) -> None:
    _, out, _ = undated_refresh
    snapshots = pq.read_table(Paths(out).parquet_dir / "snapshots").to_pylist()
    assert [row["commit_time"] for row in snapshots] == [None]
    (retrieved,) = [row["retrieved"] for row in snapshots]
    for folder in Paths(out).parquet_dir.iterdir():
        if any(folder.glob("*=*")):
            column = pq.read_table(folder).column(order_column(folder.name))
            assert set(column.to_pylist()) == {pandas.Timestamp(retrieved, tz="UTC")} or len(column) == 0, folder.name
    # The database places it at the same instant whatever the reading session's time zone.
    for zone in ("UTC", "Pacific/Kiritimati", "America/Los_Angeles"):
        with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
            connection.execute(f"set TimeZone = '{zone}'")
            (ordered_at,) = connection.execute("select ordered_at from snapshot_history").fetchone()
        assert pandas.Timestamp(ordered_at) == pandas.Timestamp(retrieved, tz="UTC"), zone


def test_a_refresh_gives_the_files_of_a_build_by_older_code_their_order_column(newest_build: Paths,
                                                                                  tmp_path: Path) -> None:
    """Older code wrote no order column, and a refresh ingests only its own snapshot: the next publish adds
    the column to every file of the build before, as its snapshot's facts give it."""
    out = copy_build(newest_build, tmp_path / "out")
    generation = (out / "current").resolve()
    (generation / ORDERED_FOR_READERS).unlink()  # as a generation of older code has none
    for path in sorted(generation.glob("parquet/*/*=*/data.parquet")):
        table = pq.read_table(path, partitioning=None)
        pq.write_table(table.drop_columns([order_column(path.parent.parent.name)]), path, compression="zstd")
    _record_files(generation, None)  # as published: the refresh takes no file for damaged
    with pytest.raises(KeyError):
        pandas.read_parquet(out / "parquet" / "token_configurations")["snapshot_ordered_at"]

    oldest = UPSTREAM / "2025-11-29-9fa07d1"
    refreshed = cli("refresh", "--source", oldest, "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert refreshed.returncode == 0, refreshed.stderr
    assert "warning" not in refreshed.stderr

    paths = Paths(out)
    files = sorted(paths.parquet_dir.glob("*/*=*/data.parquet"))
    assert {path.parent.parent.name for path in files} >= {"snapshots", "token_configurations", "index_changes",
                                                          "best_configuration_history"}
    for path in files:
        assert pq.read_table(path).column(order_column(path.parent.parent.name)).null_count == 0, path
    rows = pandas.read_parquet(paths.parquet_dir / "token_configurations").sort_values(
        ["snapshot_ordered_at", "snapshot_id"], kind="stable")
    assert list(rows["snapshot_id"].astype(str).unique()) == _history_order(paths) == \
        ["2025-11-30-9fa07d1", "2026-02-16-7885788"]
    assert (paths.current.resolve() / ORDERED_FOR_READERS).is_file()
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        assert connection.execute("select count(*) from duckdb_columns() where column_name like '%ordered_at'"
                                  " and table_name in (select table_name from duckdb_tables())").fetchall() == [(0,)]
