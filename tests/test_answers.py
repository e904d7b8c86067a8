"""The questions people bring (issue 12): latency tiers, energy at a chosen concurrency, the
energy-latency frontier and GPU comparisons, on literal rows and on the real snapshots."""

import json
import sys
from pathlib import Path

import duckdb
from conftest import SEED, cli
from test_views import connect, fetch, measured

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))


def tiers(connection: duckdb.DuckDBPyConnection, metric: str = "median_itl_ms") -> list[tuple]:
    return fetch(connection, f"""
        select latency_limit, row_id, repeat from tiered_best_configurations
        where latency_metric = '{metric}' order by latency_limit""")


def test_tiers_pick_the_cheapest_within_each_limit_with_the_index_tie_rules() -> None:
    connection = connect([
        measured(max_num_seqs=8, energy_per_token_joules=1.0, median_itl_ms=20.0),
        measured(max_num_seqs=64, energy_per_token_joules=0.5, median_itl_ms=60.0, p90_itl_ms=61, p95_itl_ms=62,
                 p99_itl_ms=300.0),
        # A tie on energy at 64: fewer GPUs wins, then the smaller batch, then the earlier repeat.
        measured(max_num_seqs=128, energy_per_token_joules=0.5, median_itl_ms=60.0, p90_itl_ms=61, p95_itl_ms=62,
                 p99_itl_ms=70.0),
        measured(max_num_seqs=64, num_gpus=2, energy_per_token_joules=0.5, median_itl_ms=55.0, p90_itl_ms=56,
                 p95_itl_ms=57, p99_itl_ms=58.0),
    ])
    assert tiers(connection) == [
        (25.0, "model-a/H100/1/8", 1),
        (50.0, "model-a/H100/1/8", 1),
        (100.0, "model-a/H100/1/64", 1),
        (200.0, "model-a/H100/1/64", 1),
        (500.0, "model-a/H100/1/64", 1),
    ]
    # p99: the 64 on one GPU is out at 100 ms, its tie at 128 and the 2-GPU one are in; fewer GPUs wins.
    assert tiers(connection, "p99_itl_ms") == [
        (25.0, "model-a/H100/1/8", 1),
        (50.0, "model-a/H100/1/8", 1),
        (100.0, "model-a/H100/1/128", 1),
        (200.0, "model-a/H100/1/128", 1),
        (500.0, "model-a/H100/1/64", 1),
    ]


def test_a_tier_with_nothing_within_it_has_no_row() -> None:
    connection = connect([measured(median_itl_ms=300.0, p90_itl_ms=310, p95_itl_ms=320, p99_itl_ms=330)])
    assert [row[0] for row in tiers(connection)] == [500.0]
    assert tiers(connection, "p99_itl_ms") == [(500.0, "model-a/H100/1/8", 1)]


def estimate(connection: duckdb.DuckDBPyConnection, concurrency: float) -> list[tuple]:
    return fetch(connection, f"""
        select method, lower_x, upper_x, round(wh_per_unit, 9), round(latency, 9)
        from energy_at_concurrency('lm-arena-chat', 'Org/Model-A', 'H100', {concurrency})""")


def test_energy_at_concurrency_interpolates_in_log_concurrency_and_never_extrapolates() -> None:
    joules = {4: 3.6e-3, 16: 1.8e-3}  # 1 and 0.5 Wh per million tokens
    connection = connect([
        measured(max_num_seqs=n, avg_batch_size=float(n), energy_per_token_joules=j, median_itl_ms=10.0 * n / 4)
        for n, j in joules.items()
    ])
    # 8 is halfway between 4 and 16 in log concurrency: halfway in energy and in latency.
    assert estimate(connection, 8) == [("interpolated", 4.0, 16.0, 0.75, 25.0)]
    assert estimate(connection, 16) == [("measured", 16.0, 16.0, 0.5, 40.0)]
    assert estimate(connection, 2) == [("below measured range", None, 4.0, None, None)]
    assert estimate(connection, 64) == [("above measured range", 16.0, None, None, None)]


def test_a_single_point_curve_answers_only_at_its_point() -> None:
    connection = connect([measured(max_num_seqs=8, avg_batch_size=6.0, energy_per_token_joules=3.6e-3)])
    assert estimate(connection, 6) == [("measured", 6.0, 6.0, 1.0, 20.0)]
    assert estimate(connection, 7)[0][0] == "above measured range"


def test_the_frontier_keeps_only_undominated_configurations_and_equal_points() -> None:
    connection = connect([
        measured(max_num_seqs=8, energy_per_token_joules=2.0, median_itl_ms=10.0),
        measured(max_num_seqs=16, energy_per_token_joules=1.0, median_itl_ms=20.0),
        measured(max_num_seqs=32, energy_per_token_joules=1.5, median_itl_ms=30.0),  # dominated by 16
        measured(max_num_seqs=64, energy_per_token_joules=1.0, median_itl_ms=20.0),  # equal to 16: both stay
        measured(max_num_seqs=8, gpu_model="B200", energy_per_token_joules=0.9, median_itl_ms=25.0),
    ])
    rows = fetch(connection, """
        select scope, gpu_scope, row_id from energy_latency_frontier
        where latency_metric = 'median_itl_ms' order by all""")
    assert rows == [
        ("model", "all", "model-a/B200/1/8"),
        ("model", "all", "model-a/H100/1/16"),
        ("model", "all", "model-a/H100/1/64"),
        ("model", "all", "model-a/H100/1/8"),
        ("model_gpu", "B200", "model-a/B200/1/8"),
        ("model_gpu", "H100", "model-a/H100/1/16"),
        ("model_gpu", "H100", "model-a/H100/1/64"),
        ("model_gpu", "H100", "model-a/H100/1/8"),
    ]


def test_gpu_comparisons_pair_the_tier_bests_of_two_gpus() -> None:
    connection = connect([
        measured(energy_per_token_joules=1.0, median_itl_ms=40.0),
        measured(gpu_model="B200", energy_per_token_joules=0.6, median_itl_ms=40.0),
    ])
    rows = fetch(connection, """
        select baseline_gpu, gpu, round(energy_ratio, 9), round(wh_saved_per_unit * 3600 / 1e6, 9)
        from gpu_comparisons where latency_metric = 'median_itl_ms' and latency_limit = 50 order by all""")
    assert rows == [("B200", "H100", round(1 / 0.6, 9), -0.4), ("H100", "B200", 0.6, 0.4)]


def test_at_the_default_tiers_the_tiers_reproduce_the_index(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        default_tiers = """
            select task, model_id, gpu, row_id, repeat from tiered_best_configurations
            where (latency_metric = 'median_itl_ms' and latency_limit = 500)
               or (task = 'text-to-image' and latency_limit = 30) or (task = 'text-to-video' and latency_limit = 300)
            order by all"""
        index = "select task, model_id, gpu, row_id, repeat from best_configurations order by all"
        assert connection.execute(default_tiers).fetchall() == connection.execute(index).fetchall()
        moved = connection.execute("""
            select count(*) from tiered_best_configurations as a
            join tiered_best_configurations as b using (task, model_id, gpu, latency_metric)
            where a.latency_metric = 'median_itl_ms' and a.latency_limit = 500 and b.latency_limit = 50
              and (a.row_id != b.row_id or a.repeat != b.repeat)""").fetchone()[0]
    assert moved > 0, "at 50 ms median ITL some index rows move to another configuration"


def test_tiers_json_is_written_with_the_index_header_and_sorted_rows(newest_build: Paths) -> None:
    index = json.loads((newest_build.index_dir / "lm-arena-chat" / "index.json").read_text())
    tiers_file = json.loads((newest_build.index_dir / "lm-arena-chat" / "tiers.json").read_text())
    assert {k: v for k, v in tiers_file.items() if k != "rows"} == {k: v for k, v in index.items() if k != "rows"}
    keys = [(r["slug"], r["gpu"], r["latency_metric"], r["latency_limit"]) for r in tiers_file["rows"]]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    assert list(tiers_file["rows"][0]) == ["slug", "model_id", "gpu", "latency_metric", "latency_limit", "row_id",
                                           "repeat", "wh_per_unit", "median_itl_ms", "p90_itl_ms", "p99_itl_ms"]
    video = json.loads((newest_build.index_dir / "text-to-video" / "tiers.json").read_text())
    assert {r["latency_limit"] for r in video["rows"]} <= {60, 120, 300} and "batch_latency_s" in video["rows"][0]
    seed = newest_build.index_dir / "lm-arena-chat" / "models" / SEED.name
    assert seed.read_bytes() == SEED.read_bytes()


def test_estimate_prints_the_range_and_each_deployment(newest_build: Paths) -> None:
    arguments = [CLI, "estimate", "--out", str(newest_build.out), "--task", "text-to-image",
                 "--model", "stabilityai/stable-diffusion-3.5-medium", "--gpu", "B200", "--concurrency", "3"]
    text = cli(*arguments[1:])
    assert text.returncode == 0, text.stderr
    assert "Wh per image over" in text.stdout and "interpolated" in text.stdout
    document = json.loads(cli(*arguments[1:], "--format", "json").stdout)
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        expected = connection.execute("""
            select min(wh_per_unit), max(wh_per_unit), count(*) from energy_at_concurrency(
                'text-to-image', 'stabilityai/stable-diffusion-3.5-medium', 'B200', 3)""").fetchone()
    assert (document["min_wh_per_unit"], document["max_wh_per_unit"], document["deployments_measured"]) == expected
    unknown = cli(*arguments[1:7], "Nobody/Nothing", *arguments[8:])
    assert unknown.returncode == 1 and "unknown model 'Nobody/Nothing'; none of the 46" in unknown.stderr


def test_every_latency_metric_reads_its_own_column(newest_build: Paths) -> None:
    """configuration_latencies takes each metric of latency_metrics from the column of that name: a metric
    added to the list without its column fails here, as an all-null or mismatched latency."""
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        metrics = [metric for (metric,) in connection.execute("select latency_metric from latency_metrics").fetchall()]
        for metric in metrics:
            mismatched, present = connection.execute(f"""
                select count(*) filter (where latency is distinct from {metric}), count(latency)
                from configuration_latencies where latency_metric = '{metric}'""").fetchone()
            assert (mismatched, present > 0) == (0, True), metric
    assert metrics
