"""The views run on Spark: energy-index spark-sql writes every view in Spark SQL over the published
Parquet. Fast: the script parses in Spark's dialect (sqlglot, both ways) and holds no construct Spark
lacks. Slow (make test-all): Spark local mode runs it over the eleven-snapshot history and every view's
rows equal DuckDB's."""

import datetime
import decimal
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import sqlglot
from conftest import cli
from sqlglot import exp

from pipeline.paths import Paths
from pipeline.spark import PUBLISHED_TABLES, spark_sql, split_statements
from pipeline.sql_objects import is_duckdb_only, view_files
from schemas import REFERENCE_TABLES

PROJECT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("energy-index"))
SPARK_VERSION = re.search(r"^SPARK_VERSION := (\S+)$", (PROJECT / "Makefile").read_text(), re.MULTILINE)
SPARK_PYTHON = PROJECT / ".engines" / f"pyspark-{SPARK_VERSION.group(1) if SPARK_VERSION else 'missing'}" / "bin" / "python"
# What Spark lacks or means otherwise, as the DuckDB spelling that would reach the script.
DUCKDB_ONLY = {
    "union by name": r"\bBY\s+NAME\b",
    "columns(...) star expression": r"\bCOLUMNS\s*\(",
    "printf/format_string (Java's %g pads: 0.00000)": r"\b(PRINTF|FORMAT_STRING)\s*\(",
    "a :: cast": r"::",
    "a macro": r"\bMACRO\b",
    "* exclude": r"\bEXCLUDE\b",
    "a view that is not temporary": r"\bCREATE\s+(OR\s+REPLACE\s+)?VIEW\b",
}


def _views() -> list[str]:
    """Every view the build makes (not the macros) but those only DuckDB's table macros read, as sql/ holds
    them now."""
    return [name for name, path in view_files().items()
            if "create or replace view" in path.read_text(encoding="utf-8") and not is_duckdb_only(name)]


def _scalar_macros() -> set[str]:
    return {name for name, path in view_files().items()
            if re.search(r"create or replace macro \w+\(.*?\) as\s+(?!table)", path.read_text(encoding="utf-8"), re.DOTALL)}


def test_the_spark_sql_parses_in_sparks_dialect_and_holds_nothing_spark_lacks(newest_build: Paths) -> None:
    script = spark_sql(newest_build)
    statements = split_statements(script)
    defined: list[str] = []
    problems = []
    macros = _scalar_macros()
    assert {"model_slug", "parallel_degree", "precision_label", "wh_from_joules"} <= macros
    for statement in statements:
        try:
            tree = sqlglot.parse_one(statement, read="spark", error_level=sqlglot.ErrorLevel.RAISE)
            again = sqlglot.parse_one(tree.sql("spark"), read="spark", error_level=sqlglot.ErrorLevel.RAISE)
        except sqlglot.errors.SqlglotError as error:
            problems.append(f"{statement.strip().splitlines()[0]}: {str(error).splitlines()[0]}")
            continue
        assert again == tree, f"Spark SQL that does not survive a round trip: {statement[:200]}"
        if isinstance(tree, exp.Set):
            continue
        assert isinstance(tree, exp.Create) and tree.kind == "VIEW"
        name = tree.this.name
        body = re.sub(r"^--.*$", "", statement, flags=re.MULTILINE)
        problems += [f"{name}: {what}" for what, pattern in DUCKDB_ONLY.items() if re.search(pattern, body, re.IGNORECASE)]
        called = {node.name.lower() for node in tree.find_all(exp.Anonymous)}
        problems += [f"{name}: calls macro {macro}" for macro in sorted(called & macros)]
        ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
        read = {table.name for table in tree.expression.find_all(exp.Table) if table.db != "parquet"} - ctes
        problems += [f"{name}: reads {source} before it is defined" for source in sorted(read - set(defined))]
        defined.append(name)
    assert problems == []
    assert defined == [*PUBLISHED_TABLES, *(v for v in defined if v in _views())]
    assert sorted(set(defined) - set(PUBLISHED_TABLES)) == sorted(_views())
    assert len(_views()) >= 18


def test_a_view_only_duckdbs_table_macros_read_is_left_out_of_the_spark_script(newest_build: Paths) -> None:
    duckdb_only = [name for name in view_files() if is_duckdb_only(name)]
    assert duckdb_only == ["configuration_curves"]
    script = spark_sql(newest_build)
    assert "VIEW configuration_curves" not in script and "configuration_curves" not in script.lower()
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        assert connection.execute("select count(*) from configuration_curves").fetchone()[0] > 0


def test_a_one_snapshot_build_gives_the_pair_tables_no_files_and_empty_views_of_their_columns(newest_build: Paths) -> None:
    statements = {s.split("CREATE OR REPLACE TEMPORARY VIEW ")[1].split()[0]: s
                  for s in split_statements(spark_sql(newest_build, "s3a://bucket/energy-index/parquet/"))
                  if "TEMPORARY VIEW" in s}
    assert "FROM parquet.`s3a://bucket/energy-index/parquet/token_configurations`" in statements["token_configurations"]
    assert "FROM parquet.`s3a://bucket/energy-index/parquet/build_parameters`" in statements["build_parameters"]
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        for table in ("configuration_changes", "index_changes"):
            assert connection.execute(f"select count(*) from {table}").fetchone()[0] == 0
            columns = [row[0] for row in connection.execute(f"select * from {table} limit 0").description]
            assert "WHERE FALSE" in statements[table] and "FROM parquet" not in statements[table]
            assert re.findall(r"AS `(\w+)`", statements[table]) == columns


def test_the_reference_tables_are_published_as_parquet_with_the_databases_rows(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        for table in REFERENCE_TABLES:
            published = pq.read_table(newest_build.reference_parquet_path(table))
            relation = connection.sql(f"select * from {table} order by all")
            expected = (getattr(relation, "to_arrow_table", None) or relation.arrow)()
            assert published.equals(expected), table
            assert published.schema.metadata[b"description"] and all(
                field.metadata[b"description"] for field in published.schema), table
    # audit_findings' limit text, formatted alike by DuckDB and Spark, reads as printf's %g wrote it.
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        written = connection.execute("select distinct r.rule, r.direction, r.tolerance, f.expected from audit_findings as f"
                                     " join audit_rules as r using (rule)").fetchall()
    percent_g = {"around_one": lambda t: f"{1 - t:g} to {1 + t:g}", "at_least": lambda t: f"at least {t:g}",
                 "at_most": lambda t: f"at most {t:g}"}
    assert len(written) >= 2 and all(expected == percent_g[direction](tolerance)
                                     for _, direction, tolerance, expected in written), written


def test_the_cli_writes_the_script_and_refuses_a_folder_without_a_build(newest_build: Paths, tmp_path: Path) -> None:
    target = tmp_path / "views.sql"
    written = cli("spark-sql", "--out", newest_build.out, "--output", target)
    assert written.returncode == 0, written.stderr
    assert f"temporary views -> {target}" in written.stderr
    assert target.read_text() == spark_sql(newest_build)
    missing = cli("spark-sql", "--out", tmp_path / "nothing")
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no published build to describe" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def _plain(value: object) -> object:
    """A value as both engines' results compare: numbers as float, times in UTC."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value


def _sorted_rows(rows: list[tuple]) -> list[tuple]:
    """Rows in one order whatever tiny float differences: floats sort by their first 9 digits."""
    def key(row: tuple) -> tuple:
        return tuple((value is None, f"{value:.9g}" if isinstance(value, float) else str(value)) for value in row)
    return sorted(([_plain(v) for v in row] for row in rows), key=key)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


@pytest.mark.slow
def test_every_view_runs_on_spark_and_equals_duckdb_on_the_history(history_build: Paths, tmp_path: Path) -> None:
    if not SPARK_PYTHON.is_file():
        pytest.fail(f"{SPARK_PYTHON} is missing: 'make test-all' installs Spark (make {SPARK_PYTHON.parents[1]}/.installed)")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark, and 'make test-all' could not install one "
                    "(apt-get install openjdk-17-jre-headless)")
    script = tmp_path / "views.sql"
    written = subprocess.run([CLI, "spark-sql", "--out", str(history_build.out), "--output", str(script)],
                             capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stderr
    views = _views()
    ran = subprocess.run([str(SPARK_PYTHON), str(PROJECT / "tests" / "spark_check.py"), str(script),
                          str(tmp_path / "spark"), *views], capture_output=True, text=True, timeout=1800)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert report["failures"] == {}
    differences = {}
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        connection.execute("set threads = 1")  # regr_slope and the like sum in one order
        for view in views:
            cursor = connection.execute(f"select * from {view}")
            columns = [column[0] for column in cursor.description]
            expected = _sorted_rows(cursor.fetchall())
            spark = connection.execute(f"select * from read_parquet('{tmp_path / 'spark' / view}/*.parquet')")
            spark_columns = [column[0] for column in spark.description]
            got = _sorted_rows(spark.fetchall())
            if spark_columns != columns:
                differences[view] = f"columns {spark_columns} against DuckDB's {columns}"
            elif len(got) != len(expected):
                differences[view] = f"{len(got)} rows against DuckDB's {len(expected)}"
            else:
                unequal = [(a, b) for a, b in zip(got, expected) if not all(map(_same, a, b))]
                if unequal:
                    differences[view] = f"{len(unequal)} of {len(expected)} rows differ, e.g. {unequal[0]}"
    assert differences == {}, differences
    assert len(views) >= 18
