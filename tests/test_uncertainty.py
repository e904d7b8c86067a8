"""Repeats as one measurement with a spread: configuration_points, the frontier and energy_at_concurrency
reading it, index_uncertainty, and the estimate command's interval and identifiers; on literal rows and
on the newest real snapshot."""

import json

import duckdb
import pytest
from test_views import connect, fetch, measured

from pipeline.cli import main
from pipeline.paths import Paths

# 3.6e-3 J per token is 1 Wh per million output tokens.
WH = 3.6e-3


def at(wh: float) -> float:
    """energy_per_token_joules for `wh` Wh per million output tokens."""
    return wh * WH


def latency(ms: float) -> dict[str, float]:
    return {"median_itl_ms": ms, "p90_itl_ms": ms + 1, "p95_itl_ms": ms + 2, "p99_itl_ms": ms + 3}


def test_repeats_are_one_point_with_their_mean_and_spread() -> None:
    connection = connect([
        measured(max_num_seqs=8, repeat=1, avg_batch_size=7.0, energy_per_token_joules=at(1.0), **latency(20.0)),
        measured(max_num_seqs=8, repeat=2, avg_batch_size=7.5, energy_per_token_joules=at(1.4), **latency(24.0)),
        measured(max_num_seqs=16, avg_batch_size=15.0, energy_per_token_joules=at(0.9), **latency(30.0)),
    ])
    assert fetch(connection, """
        select row_id, n_repeats, round(wh_per_unit, 9), round(wh_per_unit_min, 9), round(wh_per_unit_max, 9),
               measured_concurrency, median_itl_ms, p99_itl_ms, unit_label, family
        from configuration_points order by row_id""") == [
        ("model-a/H100/1/16", 1, 0.9, 0.9, 0.9, 15.0, 30.0, 33.0, "million output tokens", "token"),
        ("model-a/H100/1/8", 2, 1.2, 1.0, 1.4, 7.25, 22.0, 25.0, "million output tokens", "token"),
    ]
    # One frontier point per configuration, at the repeats' mean energy and mean latency.
    assert fetch(connection, """
        select row_id, n_repeats, round(wh_per_unit, 9), round(wh_per_unit_min, 9), round(wh_per_unit_max, 9), latency_ms
        from energy_latency_frontier where scope = 'model' and latency_metric = 'median_itl_ms' order by row_id""") == [
        ("model-a/H100/1/16", 1, 0.9, 0.9, 0.9, 30.0),
        ("model-a/H100/1/8", 2, 1.2, 1.0, 1.4, 22.0),
    ]


def test_a_lucky_repeat_is_no_longer_on_the_frontier() -> None:
    connection = connect([
        # On H100 one repeat measured 0.8, the other 1.4: 1.1 on average.
        measured(repeat=1, energy_per_token_joules=at(0.8), **latency(20.0)),
        measured(repeat=2, energy_per_token_joules=at(1.4), **latency(20.0)),
        # On B200 1.0 at the same latency: it beats the H100 configuration, though not its lucky repeat.
        measured(gpu_model="B200", energy_per_token_joules=at(1.0), **latency(20.0)),
    ])
    assert fetch(connection, """
        select distinct row_id from energy_latency_frontier where scope = 'model' order by row_id""") == [
        ("model-a/B200/1/8",)
    ]
    # The index keeps the upstream's rule: the lowest-energy row, the lucky repeat.
    assert fetch(connection, "select gpu, repeat, round(wh_per_unit, 9) from best_configurations order by gpu") == [
        ("B200", 1, 1.0), ("H100", 1, 0.8)
    ]


def estimates(connection: duckdb.DuckDBPyConnection, concurrency: float) -> list[tuple]:
    return fetch(connection, f"""
        select method, lower_x, upper_x, round(wh_per_unit, 9), round(wh_per_unit_low, 9), round(wh_per_unit_high, 9),
               lower_n_repeats, upper_n_repeats, measured_points
        from energy_at_concurrency('lm-arena-chat', 'Org/Model-A', 'H100', {concurrency})""")


def test_energy_at_concurrency_averages_repeats_before_interpolating() -> None:
    connection = connect([
        measured(max_num_seqs=4, avg_batch_size=4.0, energy_per_token_joules=at(2.0)),
        # Two repeats whose batches differ by a hair and whose energies by 40 %.
        measured(max_num_seqs=16, repeat=1, avg_batch_size=15.99, energy_per_token_joules=at(1.0)),
        measured(max_num_seqs=16, repeat=2, avg_batch_size=16.01, energy_per_token_joules=at(1.4)),
        measured(max_num_seqs=64, avg_batch_size=64.0, energy_per_token_joules=at(0.5)),
    ])
    # At their mean concurrency: their mean energy, the interval their two measurements.
    assert estimates(connection, 16) == [("measured", 16.0, 16.0, 1.2, 1.0, 1.4, 2, 2, 3)]
    # Just below and above: no jump from one repeat to the other.
    below, above = estimates(connection, 15.995)[0], estimates(connection, 16.005)[0]
    assert (below[0], below[2], above[0], above[1]) == ("interpolated", 16.0, "interpolated", 16.0)
    assert abs(below[3] - 1.2) < 1e-3 and abs(above[3] - 1.2) < 1e-3


def test_the_interval_holds_every_repeats_interpolation() -> None:
    connection = connect([
        measured(max_num_seqs=16, repeat=1, avg_batch_size=10.0, energy_per_token_joules=at(1.0)),
        measured(max_num_seqs=16, repeat=2, avg_batch_size=10.0, energy_per_token_joules=at(1.2)),
        measured(max_num_seqs=64, repeat=1, avg_batch_size=40.0, energy_per_token_joules=at(0.5)),
        measured(max_num_seqs=64, repeat=2, avg_batch_size=40.0, energy_per_token_joules=at(0.7)),
    ])
    # 20 is halfway between 10 and 40 in log concurrency.
    ((method, _, _, central, low, high, *_),) = estimates(connection, 20)
    assert (method, central, low, high) == ("interpolated", 0.85, 0.75, 0.95)
    # Each pairing of one repeat at 10 with one at 40 lies within the interval.
    for lower in (1.0, 1.2):
        for upper in (0.5, 0.7):
            assert low <= lower + (upper - lower) * 0.5 <= high
    # Where the points were measured once the interval is the figure itself.
    single = connect([measured(max_num_seqs=16, avg_batch_size=10.0, energy_per_token_joules=at(1.0)),
                      measured(max_num_seqs=64, avg_batch_size=40.0, energy_per_token_joules=at(0.5))])
    assert estimates(single, 20)[0][3:8] == (0.75, 0.75, 0.75, 1, 1)


UNCERTAINTY = """
    select model_id, gpu, row_id, n_repeats, round(wh_per_unit, 9), round(wh_repeat_min, 9), round(wh_repeat_max, 9),
           runner_up_row_id, round(runner_up_wh_per_unit, 9), round(margin_wh_per_unit, 9), round(margin_relative, 9),
           choice_basis
    from index_uncertainty order by model_id, gpu"""


def test_index_uncertainty_gives_the_repeat_spread_and_the_runner_up_margin() -> None:
    connection = connect([
        # Model A on H100: two repeats of the cheapest configuration, a runner-up 25 % dearer than its best.
        measured(max_num_seqs=8, repeat=1, energy_per_token_joules=at(1.0)),
        measured(max_num_seqs=8, repeat=2, energy_per_token_joules=at(1.2)),
        measured(max_num_seqs=16, energy_per_token_joules=at(1.25)),
        # Cheaper still, but over the deadline: not a runner-up.
        measured(max_num_seqs=32, energy_per_token_joules=at(1.1), **latency(600.0)),
        # Model A on B200: two configurations tie on energy; the smaller batch wins, margin 0.
        measured(gpu_model="B200", max_num_seqs=16, energy_per_token_joules=at(0.6)),
        measured(gpu_model="B200", max_num_seqs=8, energy_per_token_joules=at(0.6)),
        # Model B: one configuration within the deadline, the other over it.
        measured(model_id="Org/Model-B", energy_per_token_joules=at(2.0)),
        measured(model_id="Org/Model-B", max_num_seqs=64, energy_per_token_joules=at(1.0), **latency(700.0)),
    ])
    assert fetch(connection, UNCERTAINTY) == [
        ("Org/Model-A", "B200", "model-a/B200/1/8", 1, 0.6, 0.6, 0.6, "model-a/B200/1/16", 0.6, 0.0, 0.0,
         "tie on energy, decided by fewer GPUs, the smaller batch, then file order"),
        ("Org/Model-A", "H100", "model-a/H100/1/8", 2, 1.0, 1.0, 1.2, "model-a/H100/1/16", 1.25, 0.25, 0.25,
         "lowest energy"),
        ("Org/Model-B", "H100", "model-b/H100/1/8", 1, 2.0, 2.0, 2.0, None, None, None, None,
         "only configuration within the limit"),
    ]
    index_key = "select task, model_id, gpu, row_id, repeat, wh_per_unit from best_configurations order by all"
    same_key = index_key.replace("best_configurations", "index_uncertainty")
    assert fetch(connection, same_key) == fetch(connection, index_key)


# The newest real snapshot: Qwen3-30B-A3B-Instruct-2507 on 2 x H100 (lm-arena-chat) has two repeats at
# max_num_seqs 256 and 512, whose energies differ by 10 % and 19 %.
QWEN = ("lm-arena-chat", "Qwen/Qwen3-30B-A3B-Instruct-2507", "H100")


def test_on_real_data_the_estimate_no_longer_jumps_between_repeats(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        def at_concurrency(concurrency: float, columns: str = "wh_per_unit") -> tuple:
            return connection.execute(
                f"select {columns} from energy_at_concurrency(?, ?, ?, ?, gpus := 2)", [*QWEN, concurrency]
            ).fetchone()

        # One repeat of max_num_seqs 512 ran at 511.07 requests in flight, the other at 511.34; the
        # energy no longer jumps from one repeat's 27.44 to the other's 32.64 between them.
        (below,), (above,) = at_concurrency(511.07), at_concurrency(511.34)
        assert round(below, 2) == round(above, 2) == 30.04
        # At 300: between the averaged 256 point and the 384 point, not repeat 1's 34.73.
        assert round(at_concurrency(300)[0], 2) == 35.87
        low, high = at_concurrency(300, "wh_per_unit_low, wh_per_unit_high")
        # Each repeat of the 256 point, interpolated at its own measured concurrency, is within the interval.
        repeats = connection.execute("""
            with r as (
                select max_num_seqs, avg_batch_size as x, wh_per_million_output_tokens as energy from configurations
                where task = ? and model_id = ? and gpu = ? and num_gpus = 2 and max_num_seqs in (256, 384))
            select lower.energy + (upper.energy - lower.energy) * (ln(300) - ln(lower.x)) / (ln(upper.x) - ln(lower.x))
            from r as lower, r as upper where lower.max_num_seqs = 256 and upper.max_num_seqs = 384""", QWEN).fetchall()
        assert len(repeats) == 2 and all(low <= value <= high for (value,) in repeats)
        assert round(high - low, 2) == 2.28


def test_on_real_data_a_lucky_repeat_is_off_the_frontier_and_the_uncertainty_covers_the_index(
    newest_build: Paths,
) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        lucky = connection.execute("""
            select distinct latency_metric from energy_latency_frontier
            where scope = 'model' and task = ? and model_id = ? and row_id like '%/H100/2/512'""", QWEN[:2]).fetchall()
        assert lucky == []
        point_count, distinct_points, repeat_count = connection.execute(
            "select count(*), count(distinct (task, row_id)), sum(n_repeats) from configuration_points").fetchone()
        (row_count,) = connection.execute(
            "select (select count(*) from configurations) + (select count(*) from diffusion_configurations_current)"
        ).fetchone()
        assert point_count == distinct_points and repeat_count == row_count
        index = "select task, model_id, gpu, row_id, repeat, wh_per_unit from best_configurations order by all"
        assert (connection.execute(index.replace("best_configurations", "index_uncertainty")).fetchall()
                == connection.execute(index).fetchall())
        assert connection.execute("""
            select count(*) from index_uncertainty
            where not (wh_repeat_min <= wh_per_unit and wh_per_unit <= wh_repeat_max)
               or (runner_up_row_id is null) != (choice_basis = 'only configuration within the limit')
               or margin_wh_per_unit < 0""").fetchone() == (0,)


def run_estimate(capsys: pytest.CaptureFixture[str], build: Paths, *arguments: str) -> tuple[int, str, str]:
    code = main(["estimate", "--out", str(build.out), *arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_estimate_takes_a_slug_and_any_case_and_says_when_one_deployment_was_measured(
    newest_build: Paths, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_estimate(capsys, newest_build, "--task", "LM-Arena", "--model", "qwen3-8b", "--gpu", "h100",
                                  "--concurrency", "100")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Qwen/Qwen3-8B on H100, lm-arena-chat, at concurrency 100:"
    assert "(only one deployment was measured); no repeat spread (each point measured once)" in lines[1]
    assert lines[1].startswith("  28.47 Wh per million output tokens (")  # one figure, not a range of one
    assert "interpolated between measured points: concurrency 95.82 -> 28.75 and 127.8 -> 26.84" in out


def test_estimate_prints_the_interval_and_the_averaged_points_it_used(
    newest_build: Paths, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_estimate(capsys, newest_build, "--task", "lm-arena-chat", "--model", QWEN[1], "--gpu", "H100",
                                  "--concurrency", "300")
    assert code == 0, err
    assert "35.87 Wh per million output tokens" in out and "repeats give 34.73 to 37.01" in out
    assert "concurrency 255.8 -> 38.96 (mean of 2 repeats) and 383.5 -> 31.11" in out
    code, out, _ = run_estimate(capsys, newest_build, "--task", "lm-arena-chat", "--model", QWEN[1], "--gpu", "H100",
                                "--concurrency", "300", "--format", "json")
    (deployment,) = [row for row in json.loads(out)["deployments"] if row["wh_per_unit"] is not None]
    assert (round(deployment["wh_per_unit_low"], 2), round(deployment["wh_per_unit_high"], 2)) == (34.73, 37.01)


def test_a_misspelt_model_of_another_task_is_named_apart_from_the_tasks_own(
    newest_build: Paths, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_estimate(capsys, newest_build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-VL-8B-Instrct",
                                  "--gpu", "H100", "--concurrency", "100")
    assert (code, out) == (1, "")
    assert "; nearest measured for lm-arena-chat: " in err
    assert "; nearer, measured only for other tasks: Qwen/Qwen3-VL-8B-Instruct (image-chat, video-chat)" in err


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--model", "Qwen/Qwen3-8", "unknown model 'Qwen/Qwen3-8'; nearest measured for lm-arena-chat: Qwen/Qwen3-8B"),
    # Nearer to Qwen/Qwen3-VL-8B-Instruct, which only image and video chat measured.
    ("--model", "Qwen/Qwen3-8b-instrct",
     "unknown model 'Qwen/Qwen3-8b-instrct'; nearest measured for lm-arena-chat: Qwen/Qwen3-8B,"),
    ("--gpu", "A100", "unknown GPU 'A100'; nearest: "),
    ("--task", "chat", "task 'chat' is ambiguous: it could be image-chat, lm-arena-chat, video-chat"),
    ("--task", "gpqaa", "unknown task 'gpqaa'; nearest: gpqa"),
    ("--task", "text-to-image", "Qwen/Qwen3-8B was not measured for text-to-image; it was for: gpqa, lm-arena-chat"),
])
def test_estimate_refuses_an_unknown_identifier_naming_the_nearest(
    newest_build: Paths, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str,
) -> None:
    arguments = {"--task": "lm-arena-chat", "--model": "Qwen/Qwen3-8B", "--gpu": "H100", option: value}
    code, out, err = run_estimate(capsys, newest_build, *[part for pair in arguments.items() for part in pair],
                                  "--concurrency", "100")
    assert (code, out) == (1, "")
    assert err.startswith(f"energy-index: error: {message}"), err
