"""History that scales (issue 15): changes between consecutive snapshots are stored once per pair and
equal a direct comparison; a snapshot arriving out of order recomputes only its neighbours' pairs and
gives the same tables as in order; no object compares every pair."""

import re
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import NEWEST, PROJECT, copy_build, shared_folder

from pipeline.cli import main
from pipeline.paths import Paths

sys.path.insert(0, str(PROJECT / "bench"))
from history_chain import chain  # noqa: E402

STORED = ("configuration_changes", "index_changes")


@pytest.fixture(scope="session")
def seven(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> list[Path]:
    """Seven synthetic consecutive snapshots, oldest first (a chain's first six are the same whatever its length)."""
    folder = shared_folder(tmp_path_factory, worker_id, "chain-7",
                           lambda folder: chain(NEWEST, folder / "snapshots", 7, seed=3))
    return sorted(path for path in (folder / "snapshots").iterdir() if path.is_dir())


@pytest.fixture(scope="session")
def six(seven: list[Path]) -> list[Path]:
    return seven[:6]


@pytest.fixture(scope="session")
def in_order(six: list[Path], tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Paths:
    return Paths(shared_folder(tmp_path_factory, worker_id, "chain-6-in-order",
                               lambda folder: history(folder / "out", *six)) / "out")


def rows(paths: Paths, sql: str, *parameters: object) -> list[tuple]:
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        return connection.execute(sql, list(parameters)).fetchall()


def history(out: Path, *sources: Path) -> Paths:
    assert main(["history", "--source", *map(str, sources), "--out", str(out)]) == 0
    return Paths(out)


@pytest.mark.sweep
def test_stored_changes_equal_a_direct_comparison_of_each_consecutive_pair(in_order: Paths) -> None:
    paths = in_order
    order = [row[0] for row in rows(paths, "select snapshot_id from snapshot_history order by position")]
    assert len(order) == 6
    for table, macro in (("configuration_changes", "configuration_diff"), ("index_changes", "index_diff")):
        for older, newer in zip(order, order[1:]):
            stored = rows(paths, f"select * from {table} where newer_snapshot_id = ? order by all", newer)
            direct = rows(paths, f"select * from {macro}(?, ?) order by all", older, newer)
            assert stored == direct, (table, older, newer)
        assert rows(paths, f"select count(distinct newer_snapshot_id) from {table}")[0][0] <= 5
    for snapshot in order:
        stored = rows(paths, "select * from best_configuration_history where snapshot_id = ? order by all", snapshot)
        assert stored == rows(paths, "select * from best_configurations_in(?) order by all", snapshot) and stored
    # About 5 % of the rows of each snapshot were re-measured: every pair has changes.
    changed = rows(paths, "select newer_snapshot_id, count(*) from configuration_changes group by 1")
    assert len(changed) == 5 and all(count > 0 for _, count in changed)


@pytest.mark.sweep
def test_out_of_order_arrival_gives_the_same_tables_and_recomputes_only_neighbours(
    six: list[Path], in_order: Paths, tmp_path: Path
) -> None:
    late = six[2]
    shuffled = history(tmp_path / "shuffled", *(s for s in six if s != late))
    before = {
        table: {s: p.stat().st_ino for s, p in shuffled.parquet_files(table).items()}
        for table in (*STORED, "best_configuration_history")
    }
    assert main(["refresh", "--source", str(late), "--out", str(shuffled.out)]) == 0
    order = [row[0] for row in rows(in_order, "select snapshot_id from snapshot_history order by position")]
    for table in STORED:
        assert rows(shuffled, f"select * from {table} order by all") == rows(in_order, f"select * from {table} order by all")
        after = {s: p.stat().st_ino for s, p in shuffled.parquet_files(table).items()}
        recomputed = {name for name in after if before[table].get(name) != after[name]}
        # The late snapshot's own pair and its successor's: nothing else.
        assert recomputed == {order[2], order[3]}, recomputed
    best = {s: p.stat().st_ino for s, p in shuffled.parquet_files("best_configuration_history").items()}
    assert {s for s in best if before["best_configuration_history"].get(s) != best[s]} == {order[2]}
    assert rows(shuffled, "select * from best_configuration_history order by all") == rows(
        in_order, "select * from best_configuration_history order by all")


def test_no_object_compares_every_pair(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        views = connection.execute("select view_name, sql from duckdb_views() where not internal").fetchall()
        macros = {name for (name,) in connection.execute(
            "select function_name from duckdb_functions() where function_type = 'table_macro'").fetchall()}
    assert not [name for name, _ in views if name.endswith(("_diffs", "_pairs"))]
    assert {"configuration_diff", "index_diff"} <= macros


def _comparable(value: object) -> object:
    """Floats to 12 significant digits: a parallel aggregate (regr_slope in ecologits_refit) may sum
    in another order from one build to the next."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def everything(paths: Paths) -> dict[str, list[tuple]]:
    """Every table's and view's rows, sorted, and the comment of every table, view and column and the
    definition of every view and macro (under names no object has): what a reader of the database can see."""
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        names = [name for (name,) in connection.execute(
            "select table_name from duckdb_tables() where not internal"
            " union all select view_name from duckdb_views() where not internal").fetchall()]
        return {
            name: [tuple(map(_comparable, row)) for row in connection.execute(f'select * from "{name}" order by all').fetchall()]
            for name in names
        } | {
            "(comments)": connection.execute(
                "select table_name, null, comment from duckdb_tables() where not internal"
                " union all select view_name, null, comment from duckdb_views() where not internal"
                " union all select table_name, column_name, comment from duckdb_columns() where not internal"
                " order by all").fetchall(),
            "(definitions)": [(name, _excludes_sorted(definition)) for name, definition in connection.execute(
                "select view_name, sql from duckdb_views() where not internal"
                " union all select function_name, function_type || parameters::varchar || macro_definition"
                " from duckdb_functions() where schema_name = 'main' and not internal order by all").fetchall()],
        }


def _excludes_sorted(sql: str) -> str:
    """A view's or macro's text as DuckDB keeps it, with each EXCLUDE list sorted: DuckDB keeps an EXCLUDE
    as a set, whose order it prints differently once the definition has been read back from a file."""
    return re.sub(r"EXCLUDE \(([^)]*)\)", lambda match: f"EXCLUDE ({', '.join(sorted(match[1].split(', ')))})",
                  sql)


@pytest.mark.sweep
def test_a_refresh_appends_to_the_published_database_and_equals_a_full_build(
    seven: list[Path], in_order: Paths, tmp_path: Path, run_cli
) -> None:
    out = copy_build(in_order, tmp_path / "out")  # the first six published
    added = run_cli("refresh", "--source", seven[6], "--out", out)
    assert added.exit_code == 0 and "appended to the published database" in added.stderr
    appended = everything(Paths(out))
    # The refresh's index is the newest snapshot, as a build's is by default.
    full = run_cli("build", "--full", "--out", out)
    assert full.exit_code == 0 and "built from every Parquet file" in full.stderr
    rebuilt = everything(Paths(out))
    assert sorted(rebuilt) == sorted(appended)
    assert [name for name in appended if rebuilt[name] != appended[name]] == []


@pytest.mark.sweep
def test_a_build_over_a_database_changed_since_it_was_published_builds_it_whole(
    in_order: Paths, tmp_path: Path, run_cli
) -> None:
    """A build appends to a copy of the published database and keeps its views and macros: only to one
    that is as it was published (its recorded sha256); another is built from every Parquet file."""
    out = copy_build(in_order, tmp_path / "out")
    with duckdb.connect(str(Paths(out).database)) as connection:
        connection.execute("create or replace macro wh_from_joules(joules) as joules / 3000")
    built = run_cli("build", "--out", out)
    assert built.exit_code == 0, built.stderr
    warning, outcome = built.stderr.splitlines()
    # (its size changed, or only its content: which depends on how DuckDB laid the file out)
    assert re.fullmatch(r"build: warning: .*/energy_index\.duckdb: (.*published with .*|its content differs from "
                        r"what was published \(sha256\)); building it from every Parquet file", warning), warning
    assert "built from every Parquet file" in outcome
    assert rows(Paths(out), "select wh_from_joules(3600)") == [(1.0,)]
    again = run_cli("build", "--out", out)
    assert again.exit_code == 0 and "appended to the published database" in again.stderr


def test_the_pair_tables_are_the_stored_tables_of_consecutive_pairs() -> None:
    from pipeline.stored_tables import STORED
    from pipeline.paths import PAIR_TABLES

    assert sorted(table for table, (_, kind) in STORED.items() if kind == "pair") == sorted(PAIR_TABLES)
