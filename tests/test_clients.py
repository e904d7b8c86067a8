"""The database opens in every engine people use, explains itself there, and answers ad-hoc SQL
(issue 11): older DuckDB releases in their own environments, the README's queries, the data
dictionary, typed and described Parquet, and `energy-index sql`."""

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import PROJECT, cli, readme_queries

from pipeline.build import OLDEST_SUPPORTED_DUCKDB
from pipeline.paths import Paths, order_column
from pipeline.stored_tables import STORED
from schemas import TABLE_NAMES, dictionary

ENGINE_VERSIONS = re.search(r"^ENGINE_VERSIONS := (.+)$", (PROJECT / "Makefile").read_text(), re.MULTILINE)
ENGINES = ENGINE_VERSIONS.group(1).split() if ENGINE_VERSIONS else []


def engine_python(version: str) -> Path:
    python = PROJECT / ".engines" / f"duckdb-{version}" / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{python} is missing: 'make test-all' installs the engines (make .engines/duckdb-{version}/.installed)")
    return python


def test_the_engines_span_the_supported_range() -> None:
    assert ENGINES, "Makefile: no ENGINE_VERSIONS"
    oldest = min(ENGINES, key=lambda v: tuple(map(int, v.split("."))))
    assert oldest.rsplit(".", 1)[0] == OLDEST_SUPPORTED_DUCKDB.rsplit(".", 1)[0]
    assert any(v.startswith("1.") and v != oldest for v in ENGINES), "the newest 1.x is tested too"
    assert not duckdb.__version__.startswith("1."), "the project's own engine is the newest release"


@pytest.mark.parametrize("version", [*(pytest.param(version, marks=pytest.mark.engines) for version in ENGINES), "project"])
def test_every_engine_opens_both_builds_and_runs_every_readme_query(
    version: str, newest_build: Paths, history_build: Paths, tmp_path: Path
) -> None:
    python = Path(sys.executable) if version == "project" else engine_python(version)
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(readme_queries()))
    databases = [str(newest_build.database), str(history_build.database)]
    run = subprocess.run([str(python), str(PROJECT / "tests" / "engine_check.py"), str(queries), *databases],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout)
    if version != "project":
        assert outcome["version"] == version
    for database, result in outcome["databases"].items():
        with duckdb.connect(database, read_only=True) as connection:
            held = {snapshot_id for (snapshot_id,) in connection.execute("select snapshot_id from snapshots").fetchall()}
        # A README query comparing snapshots the one-snapshot build does not hold must say so (and only that).
        absent = re.compile(r"Invalid Input Error: unknown snapshot '([^']+)'; the nearest: ")
        failures = [f for f in result["failures"] if not (
            (match := absent.match(f["error"])) and match.group(1) not in held and match.group(1) in f["sql"])]
        assert failures == [], f"DuckDB {outcome['version']} on {database}"
        with duckdb.connect(database, read_only=True) as connection:
            expected = connection.execute(
                "select table_name from duckdb_tables() where not internal"
                " union all select view_name from duckdb_views() where not internal order by 1"
            ).fetchall()
        assert result["objects"] == [name for (name,) in expected] and expected
    history = outcome["databases"][str(history_build.database)]
    assert history["failures"] == []
    empty = [readme_queries()[int(n)] for n, rows in history["query_rows"].items() if rows == 0]
    assert empty == [], "documented queries that return nothing on the eleven snapshots"


def test_the_readme_has_queries_and_names_the_supported_engines() -> None:
    readme = (PROJECT / "docs" / "querying.md").read_text()
    assert len(readme_queries()) >= 9
    assert f"DuckDB {OLDEST_SUPPORTED_DUCKDB.rsplit('.', 1)[0]} and later" in readme
    assert "DESCRIBE" not in readme or "DESCRIBE` shows no" in readme


def test_the_data_dictionary_covers_every_column_and_agrees_with_the_catalog(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        catalog = connection.execute(
            """
            select c.table_name, c.column_name, c.column_index, c.data_type, c.comment, coalesce(t.comment, v.comment)
            from duckdb_columns() as c
            left join duckdb_tables() as t on t.table_name = c.table_name and t.schema_name = c.schema_name
            left join duckdb_views() as v on v.view_name = c.table_name and v.schema_name = c.schema_name
            where c.schema_name = 'main' and not c.internal
            order by 1, 3
            """
        ).fetchall()
        documented = connection.execute(
            "select object_name, column_name, position, data_type, description, object_description,"
            " unit, source, kind from data_dictionary order by 1, 3"
        ).fetchall()
    assert [row[:6] for row in documented if row[8] != "table macro"] == catalog
    assert all(row[4] and row[5] for row in documented)
    # Every table and view says what one row is and what its key is.
    assert all(re.search(r"(?i)one row|grain", row[5]) and re.search(r"(?i)key", row[5]) for row in documented)
    by_column = {(row[0], row[1]): row for row in documented}
    assert by_column[("configurations", "median_itl_ms")][6] == "ms"
    assert by_column[("token_configurations", "median_itl_ms")][7] == "tasks/<task>.json configurations[].median_itl_ms"
    assert by_column[("configurations", "wh_per_million_output_tokens")][7] == "sql/marts/configurations.sql"
    assert "diffusion" in by_column[("best_configuration_history", "row_id")][4]
    # No entry of the dictionary describes a column that no longer exists (the order columns: in the files).
    entries = dictionary.entries()
    in_files_only = {order_column(table) for table in (*TABLE_NAMES, *STORED)}
    assert set(entries.fields) - {column for _, column, *_ in documented} == in_files_only
    assert {(o, c) for o, columns in entries.columns.items() for c in columns} - set(by_column) == set()


def test_parquet_is_typed_and_carries_the_descriptions(newest_build: Paths) -> None:
    snapshots = pq.read_schema(next(iter(newest_build.parquet_files("snapshots").values())))
    assert str(snapshots.field("retrieved").type) == "date32[day]"
    assert str(snapshots.field("last_updated").type) == "date32[day]"
    assert str(snapshots.field("commit_time").type) == "timestamp[us, tz=UTC]"
    tokens = pq.read_schema(next(iter(newest_build.parquet_files("token_configurations").values())))
    batched = tokens.field("max_num_batched_tokens")
    assert str(batched.type) == "int64" and batched.nullable
    assert tokens.metadata[b"description"].decode() == dictionary.table_description("token_configurations")
    assert batched.metadata[b"description"].decode() == dictionary.column(
        "token_configurations", "max_num_batched_tokens"
    ).description
    assert tokens.field("median_itl_ms").metadata[b"unit"] == b"ms"
    # The order column, in an ingested and a stored table's files alike: typed, described, never null.
    fits = pq.read_schema(next(iter(newest_build.parquet_files("efficiency_curve_fits").values())))
    for schema in (tokens, fits):
        ordered_at = schema.field("snapshot_ordered_at")
        assert str(ordered_at.type) == "timestamp[us, tz=UTC]" and not ordered_at.nullable
        assert ordered_at.metadata[b"description"].decode() == dictionary.column("tasks", "snapshot_ordered_at").description
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        types = dict(connection.execute(
            "select column_name, data_type from duckdb_columns() where table_name = 'snapshots'"
        ).fetchall())
    assert types["retrieved"] == "DATE" and types["commit_time"] == "TIMESTAMP WITH TIME ZONE"


def sql(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("sql", "--out", out, *args)


def test_sql_prints_csv_jsonl_and_a_table_and_writes_parquet(newest_build: Paths, tmp_path: Path) -> None:
    out = newest_build.out
    query = "select gpu, count(*) as configurations from configurations group by gpu order by gpu"
    csv = sql(out, query)
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines() == ['"gpu","configurations"', '"B200",433', '"H100",405']
    lines = sql(out, query, "--format", "jsonl").stdout.splitlines()
    assert [json.loads(line) for line in lines] == [{"gpu": "B200", "configurations": 433},
                                                    {"gpu": "H100", "configurations": 405}]
    table = sql(out, query, "--format", "table").stdout
    assert "│ B200" in table and "433" in table and "configurations" in table
    target = tmp_path / "result.parquet"
    written = sql(out, query, "--format", "parquet", "--output", str(target))
    assert written.returncode == 0 and "2 row(s)" in written.stderr
    assert pq.read_table(target).to_pylist() == [{"gpu": "B200", "configurations": 433},
                                                 {"gpu": "H100", "configurations": 405}]
    query_file = tmp_path / "q.sql"
    query_file.write_text(query)
    assert sql(out, "--file", str(query_file)).stdout == csv.stdout


def test_sql_binds_parameters(newest_build: Paths) -> None:
    bound = sql(newest_build.out, "select count(*) as n from configurations where gpu = $gpu and num_gpus = $gpus",
                "--param", "gpu=H100", "--param", "gpus=2")
    assert bound.returncode == 0, bound.stderr
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        expected = connection.execute("select count(*) from configurations where gpu = 'H100' and num_gpus = 2").fetchone()[0]
    assert bound.stdout.splitlines() == ['"n"', str(expected)]
    assert sql(newest_build.out, "select 1", "--param", "no-equals").returncode == 2


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("insert into gpu_ratings values ('X', 1)", "refused: a INSERT statement"),
        ("create table t as select 1", "refused: a CREATE statement"),
        ("attach 'other.duckdb' as other", "refused: a ATTACH statement"),
        ("install httpfs", "refused: a LOAD statement"),
        ("load httpfs", "refused: a LOAD statement"),
        ("copy (select 1) to 'x.csv'", "refused: a COPY statement"),
        ("set threads = 1", "refused: a SET statement"),
        ("select * from read_csv('/etc/passwd')", "refused: the query reads or writes files"),
        ("select * from 'x.parquet'", "refused: the query reads or writes files"),
        ("select 1; select 2", "give exactly one statement"),
    ],
)
def test_sql_refuses_what_is_not_a_read_only_query(newest_build: Paths, tmp_path: Path, statement: str, words: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    refused = cli("sql", "--out", newest_build.out, statement)
    assert refused.returncode == 1
    assert words in refused.stderr
    assert "Traceback" not in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_through_sqlalchemy_the_tables_reflect(newest_build: Paths) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("duckdb_engine")
    engine = sqlalchemy.create_engine(f"duckdb:///{newest_build.database}", connect_args={"read_only": True})
    inspector = sqlalchemy.inspect(engine)
    assert {"configurations", "best_configurations", "data_dictionary"} <= set(
        inspector.get_table_names() + inspector.get_view_names()
    )
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.text("select count(*) from best_configurations")).scalar()
    assert rows > 0
    engine.dispose()


def test_the_data_dictionary_page_is_generated_from_the_build(history_build: Paths) -> None:
    from pipeline import docs

    assert docs.stale(docs.DOCS / "data-dictionary.md", history_build.out) == "", (
        "docs/data-dictionary.md is stale: run 'make docs'")


def test_the_parquet_reads_as_one_hive_partitioned_dataset(history_build: Paths) -> None:
    import pyarrow.dataset

    folder = history_build.parquet_dir / "token_configurations"
    dataset = pyarrow.dataset.dataset(folder, format="parquet", partitioning=pyarrow.dataset.HivePartitioning.discover(infer_dictionary=True))
    by_arrow = dataset.to_table(columns=["snapshot_id"]).group_by("snapshot_id").aggregate([("snapshot_id", "count")])
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        expected = dict(connection.execute("select snapshot_id, count(*) from token_configurations group by 1").fetchall())
        by_duckdb = dict(connection.execute(
            f"select snapshot_id, count(*) from read_parquet('{folder}/*/*.parquet', hive_partitioning = true) group by 1"
        ).fetchall())
    assert dict(zip(by_arrow["snapshot_id"].to_pylist(), by_arrow["snapshot_id_count"].to_pylist())) == expected
    assert by_duckdb == expected and len(expected) == 11
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"snapshot_id={s}" for s in expected)


@pytest.mark.parametrize("table", ["configuration_changes", "index_changes", "best_configuration_history", "token_configurations"])
def test_a_table_folder_reads_as_one_hive_dataset_with_the_tables_columns_and_the_order(history_build: Paths,
                                                                                       table: str) -> None:
    polars = pytest.importorskip("polars", reason="the interop extra is not installed (make test installs it)")
    import pyarrow.dataset

    folder = history_build.parquet_dir / table
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        columns = [row[0] for row in connection.execute(f"describe {table}").fetchall()]
        rows = connection.execute(f"select count(*) from {table}").fetchone()[0]
        by_duckdb = connection.sql(
            f"select * from read_parquet('{folder}/*/*.parquet', hive_partitioning = true) limit 0").columns
    by_arrow = pyarrow.dataset.dataset(folder, format="parquet", partitioning=pyarrow.dataset.HivePartitioning.discover(infer_dictionary=True)).to_table()
    by_polars = polars.read_parquet(folder, hive_partitioning=True)
    for read in (by_duckdb, by_arrow.column_names, by_polars.columns):
        assert sorted(read) == sorted([*columns, order_column(table)])
    assert by_arrow.num_rows == by_polars.height == rows > 0
