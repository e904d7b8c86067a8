"""The views a dashboard reads without writing SQL: index_history (every snapshot's index figures with
their spread, margin, boundary figures, dates and the model's name and size) and data_version (what the
database holds, in one row)."""

import shutil
from pathlib import Path

import duckdb

from conftest import SEED_RETRIEVED, copy_build, read_json

from pipeline import __version__
from pipeline.paths import Paths
from pipeline.sql_objects import is_stored, view_files
from pipeline.views import store_view_rows, views_in_dependency_order

# index_uncertainty's columns and index_boundaries' figures pivoted, with the snapshot's dates, the
# model's name and size and index_rows_v2's energy class: what index_history must hold for the index
# snapshot, computed from the views a build with that snapshot as its index gives (its retrieval date the
# build's, data_version's).
EXPECTED = """
select
    u.snapshot_id, h.position, s.last_updated, d.retrieved, s.commit, s.commit_time,
    u.family, u.task, u.model_id, u.slug, m.nickname, m.total_params_billions, m.activated_params_billions,
    u.gpu, u.row_id, u.repeat, u.unit_label, u.wh_per_unit, u.n_repeats, u.wh_repeat_min, u.wh_repeat_max,
    u.runner_up_row_id, u.runner_up_wh_per_unit, u.margin_wh_per_unit, u.margin_relative, u.choice_basis,
    server.wh_per_unit_low, server.wh_per_unit_central, server.wh_per_unit_high,
    facility.wh_per_unit_low, facility.wh_per_unit_central, facility.wh_per_unit_high, v.energy_class
from index_uncertainty as u
join snapshots as s using (snapshot_id)
join snapshot_history as h using (snapshot_id)
left join models as m using (snapshot_id, model_id)
join index_boundaries as server on server.boundary = 'server' and (server.task, server.model_id, server.gpu) = (u.task, u.model_id, u.gpu)
join index_boundaries as facility on facility.boundary = 'facility' and (facility.task, facility.model_id, facility.gpu) = (u.task, u.model_id, u.gpu)
join index_rows_v2 as v on (v.task, v.model_id, v.gpu) = (u.task, u.model_id, u.gpu)
cross join data_version as d
"""
HISTORY = """
select
    snapshot_id, snapshot_position, last_updated, retrieved, commit, commit_time,
    family, task, model_id, slug, nickname, total_params_billions, activated_params_billions,
    gpu, row_id, repeat, unit_label, wh_per_unit, n_repeats, wh_repeat_min, wh_repeat_max,
    runner_up_row_id, runner_up_wh_per_unit, margin_wh_per_unit, margin_relative, choice_basis,
    server_wh_per_unit_low, server_wh_per_unit_central, server_wh_per_unit_high,
    facility_wh_per_unit_low, facility_wh_per_unit_central, facility_wh_per_unit_high, energy_class
from index_history
where snapshot_id = ?
"""


def test_index_history_is_the_uncertainty_and_boundaries_of_each_snapshot_as_the_index(
        history_build: Paths, tmp_path: Path) -> None:
    copy = tmp_path / "energy_index.duckdb"
    shutil.copyfile(history_build.database, copy)
    with duckdb.connect(str(copy)) as connection:
        snapshots = [s for (s,) in connection.execute("select snapshot_id from snapshot_history order by position").fetchall()]
        (rows,) = connection.execute("select count(*) from index_history").fetchall()[0]
        assert len(snapshots) == 11
        seen = 0
        for snapshot in snapshots:
            connection.execute("update build_parameters set snapshot_id = ?", [snapshot])
            # as a build for that snapshot computes the stored views (index_snapshot, unified_configurations)
            for name in (name for name in views_in_dependency_order() if name in view_files() and is_stored(name)):
                store_view_rows(connection, name)
            expected = sorted(connection.execute(EXPECTED).fetchall(), key=repr)
            got = sorted(connection.execute(HISTORY, [snapshot]).fetchall(), key=repr)
            assert got == expected and got, snapshot
            # a class for every token row, none for a diffusion row
            assert all((row[6] == "token") == (row[-1] is not None) for row in got), snapshot
            seen += len(got)
        assert seen == rows


def test_index_history_has_one_row_per_snapshot_task_model_and_gpu_with_names_and_sizes(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        (rows, keys, named, sized, with_server) = connection.execute(
            "select count(*), count(distinct (snapshot_id, task, model_id, gpu)), count(nickname),"
            " count(total_params_billions), count(server_wh_per_unit_central) from index_history").fetchall()[0]
        (history_rows,) = connection.execute("select count(*) from best_configuration_history").fetchall()[0]
    assert rows == keys == history_rows == named == sized == with_server > 0


def test_data_version_is_one_row_naming_the_index_snapshot_and_the_code(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        rows = connection.execute("select * from data_version").fetchall()
        # the retrieval date the build was given (--retrieved), not the day of the fetch
        expected = connection.execute(
            "select snapshot_id, commit, commit_time, ?::date, last_updated from snapshots"
            " where snapshot_id = (select snapshot_id from index_snapshot)", [SEED_RETRIEVED]).fetchall()
        (newest,) = connection.execute("select snapshot_id from snapshot_history order by position desc limit 1").fetchall()[0]
    assert len(rows) == 1 and rows[0][:5] == expected[0] and rows[0][5] == __version__
    assert rows[0][0] == newest


def test_one_build_gives_one_retrieval_date(history_build: Paths) -> None:
    """The index files' source.retrieved, data_version's and index_history's for the index snapshot are the
    build's --retrieved; index_history's other snapshots keep the day of their fetch (snapshots.retrieved)."""
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        (stated,) = connection.execute("select retrieved::varchar from data_version").fetchone()
        dates = connection.execute(
            "select h.snapshot_id = i.snapshot_id, h.retrieved = s.retrieved::date, list(distinct h.retrieved::varchar)"
            " from index_history as h join snapshots as s using (snapshot_id) cross join index_snapshot as i"
            " group by all order by all").fetchall()
    files = {read_json(path)["source"]["retrieved"] for path in history_build.index_dir.glob("**/index.json")}
    assert stated == SEED_RETRIEVED and files == {SEED_RETRIEVED}
    # the ten older snapshots: the day of their fetch; the index snapshot: the build's date
    assert [(is_index, as_fetched) for is_index, as_fetched, _ in dates] == [(False, True), (True, False)]
    assert dates[1][2] == [SEED_RETRIEVED]


def test_no_table_or_view_has_a_column_sqlalchemy_cannot_type(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        nested = connection.execute(
            "select table_name, column_name, data_type from duckdb_columns() where schema_name = 'main'"
            " and not internal and (data_type like '%STRUCT%' or data_type like '%[]' or data_type like 'MAP%'"
            " or data_type like 'UNION%')").fetchall()
    assert nested == []


def test_every_table_macro_column_is_described_in_the_data_dictionary(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        macros = [name for (name,) in connection.execute(
            "select function_name from duckdb_functions() where function_type = 'table_macro'"
            " and schema_name = 'main' and not internal order by 1").fetchall()]
        documented = connection.execute(
            "select object_name, column_name, data_type, description, unit from data_dictionary"
            " where kind = 'table macro' order by object_name, position").fetchall()
        calls = {"best_configurations_in": "best_configurations_in(null)",
                 "configuration_diff": "configuration_diff('2025-12-01-f74deb8', '2026-01-01-6e70d23')",
                 "index_diff": "index_diff('2025-11-30-9fa07d1', '2026-02-16-7885788')",
                 "energy_at_concurrency": "energy_at_concurrency('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100)",
                 "energy_at_concurrency_unchecked":
                     "energy_at_concurrency_unchecked('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100)",
                 "efficiency_curve_points_in": "efficiency_curve_points_in(null)",
                 "energy_from_fit": "energy_from_fit('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 128)",
                 "fleet_plan": "fleet_plan('lm-arena-chat', 'Qwen/Qwen3-8B', 1e9, 'p90_itl_ms', 100)",
                 "fleet_plan_unchecked":
                     "fleet_plan_unchecked('lm-arena-chat', 'Qwen/Qwen3-8B', 1e9, 'p90_itl_ms', 100)"}
        assert sorted(calls) == macros
        expected = []
        for name in macros:
            cursor = connection.execute(f"select * from {calls[name]} limit 0")
            expected += [(name, column[0]) for column in cursor.description]
            cursor.fetchall()
    assert [(name, column) for name, column, *_ in documented] == expected
    assert all(description for *_, description, _ in documented)
    by_column = {(name, column): unit for name, column, _, _, unit in documented}
    assert by_column[("energy_at_concurrency", "lower_wh_per_unit")].startswith("Wh/")
    assert by_column[("energy_at_concurrency", "concurrency")] == "requests, images or videos"


def test_an_export_that_would_state_another_retrieval_date_is_refused(newest_build: Paths, tmp_path: Path,
                                                                      run_cli) -> None:
    out = copy_build(newest_build, tmp_path / "out")  # built with --retrieved SEED_RETRIEVED
    other = "2026-09-25"
    refused = run_cli("export", "--out", out, "--retrieved", other)
    assert refused.exit_code == 1
    assert refused.stderr == (f"energy-index: error: --retrieved {other} is not the retrieval date the database was built with, "
                              f"{SEED_RETRIEVED}; build it with --retrieved {other} (refresh, history or build) so "
                              "that the files and the database give one date\n")
    # without the option the export states the build's date; a build with the other date moves both
    assert run_cli("export", "--out", out).exit_code == 0
    assert read_json(out / "index" / "gpqa" / "index.json")["source"]["retrieved"] == SEED_RETRIEVED
    assert run_cli("build", "--out", out, "--retrieved", other).exit_code == 0
    assert run_cli("export", "--out", out, "--retrieved", other).exit_code == 0
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        assert connection.execute("select retrieved::varchar from data_version").fetchone() == (other,)
    assert read_json(out / "index" / "gpqa" / "index.json")["source"]["retrieved"] == other
