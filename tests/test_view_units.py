"""One unit a column, for the readers of the database (newest snapshot): a latency in ms (token tasks'
ITL metrics) and one in s (diffusion's batch latency) are two columns, a tier's limit likewise; a list a
BI tool cannot type is text. The index files keep their one latency_limit key and their validity
lists: the export takes each from the family's column and the joined text."""

import json
import re

import duckdb

from pipeline.paths import Paths

# A unit naming both a time in milliseconds and one in seconds, e.g. "ms (ITL metrics) or s (...)".
MIXED_TIME = re.compile(r"\bms\b.*\bs\b|\bs\b.*\bms\b")


def test_no_table_view_or_table_macro_column_mixes_ms_and_s(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        rows = connection.execute(
            "select object_name, column_name, unit from data_dictionary where unit is not null").fetchall()
        units = {(name, column): unit for name, column, unit in rows}
    assert [row for row in rows if MIXED_TIME.search(row[2])] == []
    for name in ("configuration_latencies", "energy_latency_frontier", "energy_at_concurrency"):
        assert (units[name, "latency_ms"], units[name, "latency_s"]) == ("ms", "s"), name
    for name in ("latency_tiers", "tiered_best_configurations", "latency_tier_costs", "gpu_comparisons"):
        assert (units[name, "latency_limit_ms"], units[name, "latency_limit_s"]) == ("ms", "s"), name


def test_each_family_fills_the_column_of_its_unit(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        filled = connection.execute("""
            select family, latency_metric = 'batch_latency_s' as in_seconds,
                count(latency_ms), count(latency_s), count(*)
            from configuration_latencies group by all order by all""").fetchall()
        tiers = connection.execute("""
            select t.task, u.family, count(t.latency_limit_ms), count(t.latency_limit_s), count(*)
            from tiered_best_configurations as t join task_summaries as u using (snapshot_id, task)
            group by all order by all""").fetchall()
        frontier = connection.execute("""
            select family, count(latency_ms), count(latency_s), count(*)
            from energy_latency_frontier group by all order by all""").fetchall()
        token = connection.execute("""
            select count(latency_ms), count(latency_s), count(wh_per_unit)
            from energy_at_concurrency('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100)""").fetchone()
        image = connection.execute("""
            select count(latency_ms), count(latency_s), count(wh_per_unit) from energy_at_concurrency(
                'text-to-image', 'stabilityai/stable-diffusion-3.5-medium', 'B200', 3)""").fetchone()
    assert {(family, seconds) for family, seconds, *_ in filled} == {("token", False), ("diffusion", True)}
    for family, seconds, in_ms, in_s, rows in filled:
        assert (in_ms, in_s) == ((0, rows) if seconds else (rows, 0)) and rows > 0, family
    assert {family for _, family, *_ in tiers} == {"token", "diffusion"}
    for task, family, in_ms, in_s, rows in tiers:
        assert (in_ms, in_s) == ((rows, 0) if family == "token" else (0, rows)) and rows > 0, task
    for family, in_ms, in_s, rows in frontier:
        assert (in_ms, in_s) == ((rows, 0) if family == "token" else (0, rows)) and rows > 0, family
    assert token[0] == token[2] > 0 and token[1] == 0
    assert image[1] == image[2] > 0 and image[0] == 0


def test_tiers_json_takes_its_latency_limit_from_the_familys_column(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        expected = connection.execute("""
            select task, slug, gpu, latency_metric, coalesce(latency_limit_ms, latency_limit_s), row_id, repeat
            from tiered_best_configurations order by all""").fetchall()
    written = sorted((path.parent.name, row["slug"], row["gpu"], row["latency_metric"], row["latency_limit"],
                      row["row_id"], row["repeat"])
                     for path in newest_build.index_dir.glob("*/tiers.json")
                     for row in json.loads(path.read_text(encoding="utf-8"))["rows"])
    assert written == expected and {task for task, *_ in written} >= {"lm-arena-chat", "text-to-image"}


def test_the_version_2_validity_list_is_the_views_joined_codes(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        types = {column: dtype for column, dtype in connection.execute(
            "select column_name, data_type from duckdb_columns() where table_name = 'index_rows_v2'").fetchall()}
        codes = {(task, model_id, gpu): text for task, model_id, gpu, text in connection.execute(
            "select task, model_id, gpu, validity_codes from index_rows_v2").fetchall()}
    assert types["validity_codes"] == "VARCHAR" and "validity" not in types
    written = {(path.parent.name, row["model_id"], row["gpu"]): row["validity"]
               for path in (newest_build.index_dir / "v2").glob("*/index.json")
               for row in json.loads(path.read_text(encoding="utf-8"))["rows"]}
    assert written.keys() == codes.keys()
    assert all(", ".join(written[key]) == codes[key] for key in codes)
    # every row of the snapshot carries a code (all were measured once); some carry two
    assert all(codes.values()) and any(", " in text for text in codes.values())
