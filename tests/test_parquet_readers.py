"""Every table folder under OUT/parquet reads as one dataset in pandas, pyarrow, polars, DuckDB and Spark
with their defaults, with the snapshot column once and the database's rows; pandas keeps integers that
may be null as integers (docs/querying.md, "The Parquet files as one dataset")."""

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

from pipeline.paths import Paths


def _folders(build: Paths) -> list[Path]:
    folders = sorted(path for path in build.parquet_dir.iterdir() if path.is_dir())
    assert len(folders) >= 18, [path.name for path in folders]
    return folders


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
            database_columns = [name for (name,) in connection.execute(
                "select column_name from duckdb_columns() where database_name = 'db' and table_name = ?"
                " order by column_index", [folder.name]).fetchall()]
            assert sorted(frame.columns if reader != "pyarrow" else frame.column_names) == sorted(database_columns), \
                f"{reader} on {folder.name}"
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
            columns = [name for (name,) in connection.execute(
                "select column_name from duckdb_columns() where table_name = ? order by column_index",
                [folder.name]).fetchall()]
            got = read[str(folder)]
            assert sorted(got["columns"]) == sorted(columns), folder.name
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


def test_the_documented_pandas_recipe_puts_the_snapshot_category_in_commit_order(history_build: Paths) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "querying.md").read_text(encoding="utf-8")
    (recipe,) = [block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "reorder_categories" in block]
    namespace: dict = {}
    exec(recipe.replace('"build/parquet/', f'"{history_build.parquet_dir}/'), namespace)
    rows = namespace["rows"]
    # Read as it is, the category is alphabetical: 2689bff before 9fa07d1, committed after it.
    alphabetical = list(pandas.read_parquet(history_build.parquet_dir / "token_configurations")["snapshot_id"]
                        .cat.categories)
    assert alphabetical.index("2025-11-30-2689bff") < alphabetical.index("2025-11-30-9fa07d1")
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        by_position = [s for (s,) in connection.execute("select snapshot_id from snapshot_history order by position")
                       .fetchall()]
    assert list(rows["snapshot_id"].cat.categories) == by_position and rows["snapshot_id"].cat.ordered
    assert list(rows.groupby("snapshot_id", observed=True).size().index) == by_position
