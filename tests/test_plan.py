"""energy-index plan and the table macro fleet_plan: on the newest shared snapshot, each plan meets its latency
limit, serves its demand with the fewest replicas, and its energy lies between the full-load figure and every
replica at its measured power; the token plans are derived again here from the raw task files by plain
arithmetic; the command and the macro agree; bad input and a limit nothing meets are answered in one line."""

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import NEWEST, PROJECT, cli, upstream_rows

from pipeline.paths import Paths

SECONDS_A_DAY = 86400
JOULES_PER_WH = 3600
METRIC_KEYS = {"median_itl_ms": "median_itl_ms", "p90_itl_ms": "p90_itl_ms", "p99_itl_ms": "p99_itl_ms"}

# (task, model, outputs a day, latency metric, limit): several models, GPUs, deployments and limits.
CASES = [
    ("lm-arena-chat", "Qwen/Qwen3-8B", 1e9, "p90_itl_ms", 50),
    ("lm-arena-chat", "Qwen/Qwen3-8B", 1e8, "median_itl_ms", 25),
    ("gpqa", "openai/gpt-oss-120b", 1e10, "median_itl_ms", 100),  # several deployments on each GPU
    ("gpqa", "openai/gpt-oss-20b", 3e8, "p99_itl_ms", 200),  # a configuration measured twice
    ("sourcegraph-fim", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", 1e10, "p90_itl_ms", 100),
    ("image-chat", "Qwen/Qwen3-VL-8B-Instruct", 1e9, "p99_itl_ms", 100),  # B200: below its curve
    ("lm-arena-chat", "Qwen/Qwen3-32B", 1e9, "p90_itl_ms", 100),  # H100: held at the full-load figure
    ("lm-arena-chat", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", 1e9, "median_itl_ms", 50),  # B200: at measured power
]
DIFFUSION_CASES = [
    ("text-to-image", "black-forest-labs/FLUX.1-dev", 1e5, "batch_latency_s", 30),
    ("text-to-video", "Wan-AI/Wan2.1-T2V-14B-Diffusers", 1e3, "batch_latency_s", 300),
]


def fleet_plan(build: Paths, task: str, model: str, per_day: float, metric: str, limit: float,
               **named: Any) -> list[dict[str, Any]]:
    extra = "".join(f", {name} := ${name}" for name in named)
    with duckdb.connect(str(build.database), read_only=True) as connection:
        cursor = connection.execute(f"select * from fleet_plan($task, $model, $per_day, $metric, $limit{extra})",
                                    {"task": task, "model": model, "per_day": per_day, "metric": metric,
                                     "limit": limit, **named})
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def measured_points(task: str, model: str) -> dict[tuple, dict[str, Any]]:
    """The raw task file's configurations of the model, repeats (same GPU, GPU count and max_num_seqs)
    averaged: per (gpu, num_gpus, max_num_seqs), the means of what the plan reads."""
    repeats = defaultdict(list)
    for row in upstream_rows(NEWEST, task):
        if row["model_id"] == model:
            repeats[row["gpu_model"], row["num_gpus"], row["max_num_seqs"]].append(row)
    mean = lambda rows, key: sum(row[key] for row in rows) / len(rows)  # noqa: E731
    return {key: {
        "deployment": (rows[0]["num_gpus"], rows[0]["tensor_parallel"], rows[0]["data_parallel"],
                       rows[0]["expert_parallel"], rows[0]["weight_precision"]),
        "num_gpus": key[1], "concurrency": mean(rows, "avg_batch_size"),
        "wh_per_mtok": mean(rows, "energy_per_token_joules") * 1e6 / JOULES_PER_WH,
        "tokens_per_second": mean(rows, "output_throughput_tokens_per_sec"), "power_w": mean(rows, "avg_power_watts"),
        "output_tokens": mean(rows, "avg_output_len"), **{metric: mean(rows, metric) for metric in METRIC_KEYS},
    } for key, rows in repeats.items()}


def derive(task: str, model: str, tokens_per_day: float, metric: str, limit: float) -> dict[str, dict[str, Any]]:
    """The plan on each GPU by hand from the raw task file: per configuration within the limit, replicas =
    ceil(demand ÷ (86,400 × throughput)), the load fraction and concurrency each replica carries, the
    deployment's curve there (linear in log concurrency between the neighbouring measured concurrencies),
    held between the full-load figure and the replicas' measured power; the lowest energy wins."""
    points = measured_points(task, model)
    plans: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (gpu, num_gpus, max_num_seqs), point in points.items():
        if point[metric] > limit:
            continue
        per_second = tokens_per_day / SECONDS_A_DAY
        replicas = math.ceil(per_second / point["tokens_per_second"])
        load = per_second / (replicas * point["tokens_per_second"])
        concurrency = load * point["concurrency"]
        curve = defaultdict(list)  # the deployment's points, those at one concurrency averaged
        for (other_gpu, _, _), other in points.items():
            if other_gpu == gpu and other["deployment"] == point["deployment"]:
                curve[other["concurrency"]].append(other["wh_per_mtok"])
        below = [x for x in curve if x <= concurrency]
        above = [x for x in curve if x >= concurrency]
        wh = None
        if below:
            low_x, high_x = max(below), min(above)
            low_e, high_e = (sum(curve[x]) / len(curve[x]) for x in (low_x, high_x))
            wh = low_e if low_x == high_x else low_e + (high_e - low_e) * math.log(concurrency / low_x) / math.log(
                high_x / low_x)
            ceiling = replicas * point["power_w"] * 24 / (tokens_per_day / 1e6)  # Wh per Mtok at measured power
            wh = min(max(wh, point["wh_per_mtok"]), ceiling)
        plans[gpu].append({"row_id": f"{model.rpartition('/')[2].lower()}/{gpu}/{num_gpus}/{max_num_seqs}",
                           "replicas": replicas, "gpus": replicas * num_gpus, "wh_per_unit": wh,
                           "kwh_per_day": None if wh is None else tokens_per_day / 1e6 * wh / 1000})
    return {gpu: min(options, key=lambda p: (p["wh_per_unit"] is None, p["wh_per_unit"] or 0, p["gpus"], p["row_id"]))
            for gpu, options in plans.items()}


@pytest.mark.parametrize("case", CASES + DIFFUSION_CASES, ids=lambda case: f"{case[0]}-{case[1]}-{case[3]}")
def test_each_plan_meets_the_limit_serves_the_demand_and_lies_within_its_bounds(case: tuple,
                                                                                 newest_build: Paths) -> None:
    task, model, per_day, metric, limit = case
    rows = fleet_plan(newest_build, task, model, per_day, metric, limit)
    planned = [row for row in rows if row["plan_status"] == "planned"]
    assert planned and {row["boundary"] for row in rows} == {"gpu_only", "server", "facility"}
    for row in planned:
        assert row[f"latency_{'s' if metric == 'batch_latency_s' else 'ms'}"] <= limit
        assert row["units_per_day"] == per_day
        assert row["replicas"] * row["units_per_second"] * SECONDS_A_DAY >= per_day
        assert (row["replicas"] - 1) * row["units_per_second"] * SECONDS_A_DAY < per_day  # the fewest
        assert row["gpus"] == row["replicas"] * row["num_gpus"]
        assert row["full_load_kwh_per_day"] * (1 - 1e-12) <= row["kwh_per_day_central"]
        assert row["kwh_per_day_central"] <= row["measured_power_kwh_per_day"] * (1 + 1e-12)
        assert row["kwh_per_day_low"] <= row["kwh_per_day_central"] <= row["kwh_per_day_high"]
        assert row["power_kw_central"] == pytest.approx(row["kwh_per_day_central"] / 24, rel=1e-12)
        if row["boundary"] == "gpu_only":
            assert row["kwh_per_day_low"] == row["kwh_per_day_central"] == row["kwh_per_day_high"]
    for boundary in ("gpu_only", "server", "facility"):
        at = [row for row in planned if row["boundary"] == boundary]
        assert [row["energy_rank"] for row in at] == list(range(1, len(at) + 1))
        assert sorted(at, key=lambda row: row["kwh_per_day_central"]) == at
        fewest = [row for row in at if row["is_fewest_gpus"]]
        assert len(fewest) == 1 and fewest[0]["gpus"] == min(row["gpus"] for row in at)


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}-{case[1]}-{case[3]}")
def test_the_token_plans_are_derived_again_from_the_raw_task_file(case: tuple, newest_build: Paths) -> None:
    task, model, per_day, metric, limit = case
    expected = derive(task, model, per_day, metric, limit)
    rows = [row for row in fleet_plan(newest_build, task, model, per_day, metric, limit)
            if row["boundary"] == "gpu_only" and row["plan_status"] != "no configuration within the limit"]
    assert {row["gpu"] for row in rows} == set(expected)
    for row in rows:
        plan = expected[row["gpu"]]
        assert (row["row_id"], row["replicas"], row["gpus"]) == (plan["row_id"], plan["replicas"], plan["gpus"])
        if plan["wh_per_unit"] is None:  # every candidate's load below its curve
            assert row["plan_status"] == "below the measured range" and row["wh_per_unit"] is None
            continue
        assert row["wh_per_unit"] == pytest.approx(plan["wh_per_unit"], rel=1e-9)
        assert row["kwh_per_day_central"] == pytest.approx(plan["kwh_per_day"], rel=1e-9)
    assert any(row["plan_status"] == "planned" for row in rows)


def test_the_energy_is_the_curve_that_estimate_reads(newest_build: Paths) -> None:
    """Where the curve's figure is within its bounds, it is energy_at_concurrency's at the replica's concurrency."""
    rows = fleet_plan(newest_build, "gpqa", "openai/gpt-oss-120b", 1e10, "median_itl_ms", 100, gpu_name="H100")
    (row,) = [row for row in rows if row["boundary"] == "gpu_only"]
    assert row["method"] == "interpolated"
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        (estimated,) = connection.execute(
            "select wh_per_unit from energy_at_concurrency('gpqa', 'openai/gpt-oss-120b', 'H100', ?, gpus := ?)",
            [row["replica_concurrency"], row["num_gpus"]]).fetchone()
    assert row["wh_per_unit"] == pytest.approx(estimated, rel=1e-12)


def test_each_stored_curve_reads_back_as_its_points_to_the_last_bit(newest_build: Paths) -> None:
    """configuration_curves keeps each deployment's curve as text (BI tools type no nested column):
    curve_points_of reads it back as the very doubles of the points the curve is made of."""
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        stored = connection.execute(
            "select task, row_id, [[p.x, p.point] for p in curve_points_of(curve)] from configuration_curves").fetchall()
        points = connection.execute(
            "select task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree,"
            " ring_degree, precision, width, height, num_frames, fps, inference_steps, measured_concurrency,"
            " wh_per_unit, row_id from configuration_points").fetchall()
    deployments = defaultdict(lambda: defaultdict(list))
    for *deployment, x, wh_per_unit, row_id in points:
        deployments[tuple(deployment)][x].append(wh_per_unit)
    expected = {}
    for *deployment, x, _, row_id in points:
        curve = deployments[tuple(deployment)]
        # one point per concurrency (in the newest snapshot each is one configuration's figure)
        expected[deployment[0], row_id] = [[at, sum(values) / len(values)] for at, values in sorted(curve.items())]
    assert len(stored) == len(points) > 1800
    assert {(task, row_id): curve for task, row_id, curve in stored} == expected
    assert any(len(curve) > 5 for _, _, curve in stored)


def test_the_commands_skip_two_optimizers_for_the_same_rows_and_a_users_statement_keeps_them(
        newest_build: Paths) -> None:
    """plan's and estimate's session leaves out the optimizers SKIPPED_FOR_OWN_QUESTIONS names, and their
    queries give the rows a connection with every optimizer gives; `sql` keeps every optimizer."""
    from pipeline.plan import QUERY
    from pipeline.query import SKIPPED_FOR_OWN_QUESTIONS, session

    questions = [{"task": task, "model": model, "outputs_per_day": per_day, "metric": metric, "limit": limit,
                  "gpu": None, "requests_per_second": None, "carbon_intensity": 420.0}
                 for task, model, per_day, metric, limit in CASES + DIFFUSION_CASES]
    estimate = "select * from energy_at_concurrency_unchecked($task, $model, 'H100', 50)"
    with session(newest_build) as (connection, _):
        assert connection.execute("select current_setting('disabled_optimizers')").fetchone() == (
            SKIPPED_FOR_OWN_QUESTIONS,)
        skipped = [connection.execute(QUERY, question).fetchall() for question in questions]
        skipped_estimates = [connection.execute(estimate, {"task": q["task"], "model": q["model"]}).fetchall()
                             for q in questions]
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        assert [connection.execute(QUERY, question).fetchall() for question in questions] == skipped
        assert [connection.execute(estimate, {"task": q["task"], "model": q["model"]}).fetchall()
                for q in questions] == skipped_estimates
    assert all(skipped) and any(skipped_estimates)
    result = cli("sql", "--out", newest_build.out, "select current_setting('disabled_optimizers') as skipped")
    assert (result.returncode, result.stdout) == (0, '"skipped"\n""\n'), result.stderr


def run_plan(capsys: pytest.CaptureFixture[str], build: Paths, *arguments: str) -> tuple[int, str, str]:
    """energy-index plan --out BUILD ARGUMENTS in this process: its exit status, standard output and error."""
    from pipeline.cli import main

    code = main(["plan", "--out", str(build.out), *arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_json(capsys: pytest.CaptureFixture[str], build: Paths, *arguments: str) -> dict[str, Any]:
    code, out, err = run_plan(capsys, build, *arguments, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_the_command_formats_the_macros_rows(newest_build: Paths, capsys) -> None:
    document = plan_json(capsys, newest_build, "--task", "arena", "--model", "qwen3-8b", "--tokens-per-day", "1e9",
                         "--p90-itl-ms", "50", "--carbon-intensity", "400")
    rows = fleet_plan(newest_build, "lm-arena-chat", "Qwen/Qwen3-8B", 1e9, "p90_itl_ms", 50, carbon_intensity=400)
    planned = [row for row in rows if row["plan_status"] == "planned"]
    assert (document["task"], document["model_id"], document["snapshot_id"]) == (
        "lm-arena-chat", "Qwen/Qwen3-8B", NEWEST.name)
    assert document["commit"].startswith("7885788")
    assert len(document["plans"]) == len(planned) == 6
    for plan, row in zip(document["plans"], planned):
        assert (plan["gpu"], plan["boundary"], plan["row_id"], plan["replicas"], plan["gpus"]) == (
            row["gpu"], row["boundary"], row["row_id"], row["replicas"], row["gpus"])
        for level in ("low", "central", "high"):
            assert plan["kwh_per_day"][level] == row[f"kwh_per_day_{level}"]
            assert plan["power_kw"][level] == row[f"power_kw_{level}"]
            assert plan["gco2e_per_day"][level] == row[f"gco2e_per_day_{level}"] == row[f"kwh_per_day_{level}"] * 400
    # A grid intensity of 0 (a grid without operational emissions) is an answer: no gCO2e a day.
    clean = plan_json(capsys, newest_build, "--task", "arena", "--model", "qwen3-8b", "--tokens-per-day", "1e9",
                      "--p90-itl-ms", "50", "--carbon-intensity", "0")
    assert [plan["gco2e_per_day"] for plan in clean["plans"]] == [dict.fromkeys(("low", "central", "high"), 0.0)] * 6
    code, shown, _ = run_plan(capsys, newest_build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                              "--tokens-per-day", "1e9", "--p90-itl-ms", "50", "--boundary", "server")
    assert code == 0
    assert "server boundary" in shown and "gpu_only boundary" not in shown
    assert f"{planned[2]['kwh_per_day_central']:.4g} kWh a day" in shown


def test_each_boundary_line_names_the_factors_of_each_gpu(newest_build: Paths, capsys) -> None:
    """A boundary's factors differ from GPU to GPU (a server factor derived from each GPU's rated power): its
    line names each GPU's, as boundary_multipliers has them, not the first plan's for all."""
    code, shown, err = run_plan(capsys, newest_build, "--task", "gpqa", "--model", "openai/gpt-oss-120b",
                                "--tokens-per-day", "1e10", "--p90-itl-ms", "100")
    assert code == 0, err
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        multipliers = connection.execute("select boundary, gpu, multiplier_low, multiplier_central, multiplier_high "
                                         "from boundary_multipliers where gpu in ('B200', 'H100') "
                                         "and boundary <> 'gpu_only' order by boundary, gpu").fetchall()
    assert len({(row[0], row[2]) for row in multipliers}) == 4  # the two GPUs' low ends differ
    for boundary in ("server", "facility"):
        (line,) = [line for line in shown.splitlines() if line.startswith(f"  {boundary} boundary")]
        each = "; ".join(f"{gpu} {central:.3g}, range {low:.3g} to {high:.3g}"
                         for name, gpu, low, central, high in multipliers if name == boundary)
        assert f"(GPU energy × each GPU's factor: {each}; assumed factors" in line


def test_requests_a_second_count_the_models_mean_output_length(newest_build: Paths, capsys) -> None:
    document = plan_json(capsys, newest_build, "--task", "gpqa", "--model", "openai/gpt-oss-20b",
                         "--requests-per-second", "5", "--median-itl-ms", "100")
    points = measured_points("gpqa", "openai/gpt-oss-20b")
    mean_output = sum(point["output_tokens"] for point in points.values()) / len(points)
    assert document["demand"]["mean_output_tokens"] == pytest.approx(mean_output, rel=1e-12)
    assert document["demand"]["per_day"] == pytest.approx(5 * SECONDS_A_DAY * mean_output, rel=1e-12)
    # narrowed to one GPU, the demand is the same: the mean is over every GPU's configurations
    one = plan_json(capsys, newest_build, "--task", "gpqa", "--model", "openai/gpt-oss-20b",
                    "--requests-per-second", "5", "--median-itl-ms", "100", "--gpu", "B200")
    assert one["demand"] == document["demand"] and {plan["gpu"] for plan in one["plans"]} == {"B200"}


def test_a_limit_nothing_meets_says_why_per_gpu(newest_build: Paths, capsys) -> None:
    code, shown, err = run_plan(capsys, newest_build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                                "--tokens-per-day", "1e9", "--p90-itl-ms", "5")
    assert code == 0, err
    points = measured_points("lm-arena-chat", "Qwen/Qwen3-8B")
    for gpu in ("H100", "B200"):
        lowest = min(point["p90_itl_ms"] for (g, _, _), point in points.items() if g == gpu)
        assert (f"no plan on {gpu}: no configuration within the limit (the lowest p90_itl_ms measured there: "
                f"{lowest:.4g} ms)") in shown
    assert "no GPU has a plan within the limit" in shown
    document = plan_json(capsys, newest_build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                         "--tokens-per-day", "1e9", "--p90-itl-ms", "5")
    assert document["plans"] == [] and {row["gpu"] for row in document["without_plan"]} == {"H100", "B200"}


def test_a_gpu_without_a_rated_power_has_no_plan_beyond_its_own_energy(source_copy: Path, tmp_path: Path,
                                                                       newest_build: Paths, capsys) -> None:
    """The newest snapshot with its B200 renamed to a GPU gpu_ratings does not rate: ingest warns once per
    table naming it; the plan on it at gpu_only is the B200's, and at server and facility it has none (not
    GPU energy taken for the server's), which the command says; estimate refuses the server boundary, and
    compare says it has no figures there."""
    from pipeline.cli import main

    for path in source_copy.rglob("*.json"):
        text = path.read_text("utf-8")
        if '"gpu_model": "B200"' in text:
            path.write_text(text.replace('"gpu_model": "B200"', '"gpu_model": "GB300"'), "utf-8")
    out = tmp_path / "out"
    assert main(["refresh", "--source", str(source_copy), "--out", str(out), "--quiet"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 2 and all(line.endswith("(gpu_model has a known rated board power): gpu_model='GB300'")
                                      for line in warnings), warnings
    build = Paths(out)
    question = ("lm-arena-chat", "Qwen/Qwen3-8B", 1e9, "p90_itl_ms", 100)
    rated = {(row["gpu"], row["boundary"]): row for row in fleet_plan(newest_build, *question)}
    renamed = {(row["gpu"], row["boundary"]): row for row in fleet_plan(build, *question)}
    assert renamed["GB300", "gpu_only"]["plan_status"] == "planned"
    assert renamed["GB300", "gpu_only"]["kwh_per_day_central"] == rated["B200", "gpu_only"]["kwh_per_day_central"]
    for boundary in ("server", "facility"):
        assert renamed["GB300", boundary]["plan_status"] == "no boundary factors"
        assert renamed["GB300", boundary]["kwh_per_day_central"] is None
        assert renamed["GB300", boundary]["boundary_factor_central"] is None
        ranked = {"energy_rank", "is_fewest_gpus"}  # the H100 is now alone at the boundary
        assert ({key: value for key, value in renamed["H100", boundary].items() if key not in ranked}
                == {key: value for key, value in rated["H100", boundary].items() if key not in ranked})
        assert (renamed["H100", boundary]["energy_rank"], renamed["H100", boundary]["is_fewest_gpus"]) == (1, True)
    document = plan_json(capsys, build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--tokens-per-day",
                         "1e9", "--p90-itl-ms", "100", "--boundary", "facility")
    assert [plan["gpu"] for plan in document["plans"]] == ["H100"]
    assert [(row["gpu"], row["boundary"]) for row in document["without_plan"]] == [("GB300", "facility")]
    code, shown, err = run_plan(capsys, build, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                                "--tokens-per-day", "1e9", "--p90-itl-ms", "100")
    assert code == 0, err
    assert ("no plan on GB300 at the server boundary: no boundary factors for the GPU: gpu_ratings has no rated "
            "board power for it") in shown
    # A load below the measured curve on it too: the missing factors are what it is said to lack at server.
    code, shown, err = run_plan(capsys, build, "--task", "gpqa", "--model", "Qwen/Qwen3-8B", "--tokens-per-day", "1e3",
                                "--p90-itl-ms", "500", "--boundary", "server")
    assert code == 0, err
    assert "no plan on GB300 at the server boundary: no boundary factors for the GPU" in shown
    assert main(["estimate", "--out", str(out), "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--gpu",
                 "GB300", "--concurrency", "100", "--boundary", "server"]) == 1
    assert "no server boundary factors for GPU GB300" in capsys.readouterr().err
    assert main(["compare", "--out", str(out), "--task", "lm-arena-chat", "qwen3-8b", "qwen3-14b"]) == 0
    assert ("; no facility figures for GB300: gpu_ratings has no rated board power for it"
            in capsys.readouterr().out)


def test_a_load_below_the_measured_curve_gives_bounds_not_a_figure(newest_build: Paths, capsys) -> None:
    document = plan_json(capsys, newest_build, "--task", "gpqa", "--model", "Qwen/Qwen3-8B",
                         "--tokens-per-day", "1e7", "--median-itl-ms", "20", "--gpu", "H100")
    (without,) = document["without_plan"]
    assert document["plans"] == [] and without["reason"].startswith("each replica's load is below")
    bounds = without["kwh_per_day_bounds"]
    assert bounds["boundary"] == "gpu_only" and 0 < bounds["full_load"] < bounds["measured_power"]


# A value not of its option's form or range, options that conflict or are missing: usage errors, exit 2, as
# docs/operating.md's "Exit status" says (a volume beyond any sensible fleet is a limit beyond its maximum).
USAGE = [
    (["--tokens-per-day", "0"], "Invalid value for '--tokens-per-day': must be a positive number, got '0'"),
    (["--tokens-per-day", "-5"], "Invalid value for '--tokens-per-day': must be a positive number, got '-5'"),
    (["--tokens-per-day", "nan"], "Invalid value for '--tokens-per-day': must be a positive number, got 'nan'"),
    (["--tokens-per-day", "inf"], "Invalid value for '--tokens-per-day': must be a positive number, got 'inf'"),
    (["--tokens-per-day", "lots"], "Invalid value for '--tokens-per-day': not a number: 'lots'"),
    (["--tokens-per-day", "1e30"], "Invalid value for '--tokens-per-day': beyond any sensible fleet: at most 1e+18 "
                                   "output tokens a day, got '1e30'"),
    (["--tokens-per-day", "1e17"], "Invalid value for '--tokens-per-day': 1e+17 is beyond any sensible fleet (the "
                                   "smallest plan needs "),
    (["--requests-per-second", "1e12"], "Invalid value for '--requests-per-second': beyond any sensible fleet: at "
                                        "most 1.157e+08 requests a second, got '1e12'"),
    (["--tokens-per-day", "1e9", "--carbon-intensity", "-1"],
     "Invalid value for '--carbon-intensity': must be a number of 0 or more, got '-1'"),
    (["--tokens-per-day", "1e9", "--p90-itl-ms", "0"], "Invalid value for '--p90-itl-ms': must be a positive number, "
                                                        "got '0'"),
    (["--tokens-per-day", "1e9", "--p90-itl-ms", "fast"], "Invalid value for '--p90-itl-ms': not a number: 'fast'"),
    ([], "give one demand: one of --tokens-per-day, --requests-per-second, --images-per-day, --videos-per-day"),
    (["--tokens-per-day", "1e9", "--requests-per-second", "3"], "give one demand: one of --tokens-per-day, "
     "--requests-per-second, --images-per-day, --videos-per-day; got --tokens-per-day, --requests-per-second"),
    (["--tokens-per-day", "1e9", "--p90-itl-ms", "50", "--median-itl-ms", "50"], "give one latency limit: one of "
     "--median-itl-ms, --p90-itl-ms, --p99-itl-ms, --batch-latency-s; got --median-itl-ms, --p90-itl-ms"),
]


@pytest.mark.parametrize(("arguments", "message"), USAGE, ids=lambda value: " ".join(value)
                         if isinstance(value, list) else None)
def test_a_value_out_of_its_range_is_a_usage_error_naming_the_option(arguments: list[str], message: str,
                                                                     newest_build: Paths) -> None:
    limit = [] if any(option.endswith("-ms") for option in arguments) else ["--p90-itl-ms", "100"]
    result = cli("plan", "--out", newest_build.out, "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                 *arguments, *limit)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"energy-index: error: {message}"), result.stderr


@pytest.mark.parametrize(("arguments", "message"), [
    (["--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--images-per-day", "1e5", "--p90-itl-ms", "100"],
     "--images-per-day does not apply to lm-arena-chat, whose figures are per million output tokens; give "
     "--tokens-per-day or --requests-per-second"),
    (["--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--tokens-per-day", "1e9", "--batch-latency-s", "30"],
     "--batch-latency-s does not apply to lm-arena-chat; give --median-itl-ms or --p90-itl-ms or --p99-itl-ms"),
    (["--task", "text-to-image", "--model", "flux.1-dev", "--images-per-day", "1e5", "--p90-itl-ms", "30"],
     "--p90-itl-ms does not apply to text-to-image; give --batch-latency-s"),
    (["--task", "lm-arena-chat", "--model", "Nobody/Nothing", "--tokens-per-day", "1e9", "--p90-itl-ms", "50"],
     "unknown model 'Nobody/Nothing'"),
    (["--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--tokens-per-day", "1e9", "--p90-itl-ms", "50",
      "--gpu", "A100"], "unknown GPU 'A100'"),
    (["--task", "sourcegraph-fim", "--model", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "--tokens-per-day", "1e9",
      "--p90-itl-ms", "50", "--gpu", "H100"],
     "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 was not measured on H100 for sourcegraph-fim; only on: B200"),
    (["--task", "gpqa", "--model", "Qwen/Qwen3-VL-8B-Instruct", "--tokens-per-day", "1e9", "--p90-itl-ms", "50"],
     "Qwen/Qwen3-VL-8B-Instruct was not measured for gpqa; it was for: image-chat"),
])
def test_a_question_the_data_cannot_answer_is_one_line(arguments: list[str], message: str, newest_build: Paths,
                                                       run_cli) -> None:
    """Well-formed options that do not fit the task or name what it did not measure: exit 1, as estimate's."""
    result = run_cli("plan", "--out", newest_build.out, *arguments)
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"energy-index: error: {message}"), result.stderr


def test_the_worked_example_in_the_docs_is_derived_by_hand(newest_build: Paths, capsys) -> None:
    """docs/planning.md's example: its output is the command's, and its figures follow from the raw task
    file by the arithmetic the page shows."""
    page = (PROJECT / "docs" / "planning.md").read_text(encoding="utf-8")
    command = re.search(r"```sh\n(energy-index plan [^\n]+)\n```", page).group(1)
    arguments = command.split()[2:]
    code, shown, _ = run_plan(capsys, newest_build, *arguments)
    assert code == 0
    for line in shown.splitlines():
        if not line.lstrip().startswith(("data:", "method:")):
            assert line in page, line
    # By hand: Qwen3-8B on one H100, lm-arena-chat, 1e9 tokens a day, p90 ITL at most 50 ms.
    rows = {key[2]: point for key, point in measured_points("lm-arena-chat", "Qwen/Qwen3-8B").items()
            if key[0] == "H100"}
    chosen = rows[256]  # max_num_seqs 256: the largest batch within 50 ms (384 measured 50.74 ms)
    assert chosen["p90_itl_ms"] <= 50 < rows[384]["p90_itl_ms"]
    replicas = math.ceil(1e9 / SECONDS_A_DAY / chosen["tokens_per_second"])
    load = 1e9 / SECONDS_A_DAY / (replicas * chosen["tokens_per_second"])
    concurrency = load * chosen["concurrency"]
    low, high = rows[128], rows[192]  # the measured concurrencies either side of the replica's
    assert low["concurrency"] <= concurrency <= high["concurrency"]
    weight = math.log(concurrency / low["concurrency"]) / math.log(high["concurrency"] / low["concurrency"])
    wh = low["wh_per_mtok"] + (high["wh_per_mtok"] - low["wh_per_mtok"]) * weight
    kwh = 1e9 / 1e6 * wh / 1000
    full_load, at_power = 1e9 / 1e6 * chosen["wh_per_mtok"] / 1000, replicas * chosen["power_w"] * 24 / 1000
    assert full_load < kwh < at_power
    for figure in (f"{replicas} replicas", f"{load:.1%}", f"{concurrency:.2f}", f"{weight:.4f}", f"{wh:.4g} Wh",
                   f"{kwh:.4g} kWh a day", f"{kwh / 24:.4g} kW", f"{full_load:.4g}", f"{at_power:.4g}",
                   f"{low['wh_per_mtok']:.4g}", f"{high['wh_per_mtok']:.4g}"):
        assert figure in page, figure
    assert derive("lm-arena-chat", "Qwen/Qwen3-8B", 1e9, "p90_itl_ms", 50)["H100"]["row_id"] == "qwen3-8b/H100/1/256"


def test_the_reports_fleet_table_is_the_least_energy_plan_of_each_tier_and_volume(newest_build: Paths) -> None:
    from pipeline.charts import Metric
    from pipeline.report import FLEET_QUERY, FLEET_VOLUMES, Task, _fleet_table

    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        cursor = connection.execute(FLEET_QUERY, {"task": "gpqa"})
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        tiers = connection.execute("select latency_metric, latency_limit_ms from latency_tiers "
                                   "where family = 'token'").fetchall()
    assert {(row["latency_metric"], row["latency_limit"], row["per_day"]) for row in rows} <= {
        (metric, limit, volume) for metric, limit in tiers for volume in FLEET_VOLUMES}
    assert len(tiers) == 15 and len(rows) >= 3 * 12  # every tier from 50 ms on has a plan
    for row in rows[::7]:  # the cheapest plan over every model of the task, as the macro ranks each model's
        every = [plan for plan in fleet_plan(newest_build, "gpqa", None, row["per_day"], row["latency_metric"],
                                             row["latency_limit"])
                 if plan["boundary"] == "gpu_only" and plan["plan_status"] == "planned"]
        assert row["kwh_per_day_central"] == min(plan["kwh_per_day_central"] for plan in every)
    metrics = [Metric(latency_metric=name, title=f"{name} (ms)", short_title=name, unit="ms") for name in METRIC_KEYS]
    task = Task("gpqa", "Problem Solving", "token", "million output tokens", {}, metrics)
    table = _fleet_table(task, rows)
    assert table.count("<tr>") == 1 + len({(row["latency_metric"], row["latency_limit"]) for row in rows})
    assert "10⁹ tokens a day" in table and f"{rows[0]['kwh_per_day_central']:.4g}" in table


def test_the_points_a_plan_reads_are_the_raw_repeats_means(newest_build: Paths) -> None:
    """configuration_points, whose rows fleet_plan plans from, holds each configuration's repeats' means as
    the raw task file gives them (concurrency, energy, latencies, throughput, power, output length), and each
    chosen plan carries its configuration's."""
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        for task, model, per_day, metric, limit in CASES:
            raw = {f"{model.rpartition('/')[2].lower()}/{gpu}/{num_gpus}/{max_num_seqs}": point
                   for (gpu, num_gpus, max_num_seqs), point in measured_points(task, model).items()}
            cursor = connection.execute(
                "select row_id, measured_concurrency, wh_per_unit, median_itl_ms, p90_itl_ms, p99_itl_ms, "
                "units_per_second, gpu_power_watts_total, avg_output_tokens from configuration_points "
                "where task = ? and model_id = ?", [task, model])
            stored = {row[0]: row[1:] for row in cursor.fetchall()}
            assert stored.keys() == raw.keys()
            for row_id, point in raw.items():
                assert stored[row_id] == pytest.approx(
                    (point["concurrency"], point["wh_per_mtok"], *(point[name] for name in METRIC_KEYS),
                     point["tokens_per_second"], point["power_w"], point["output_tokens"]), rel=1e-12)
            planned = [row for row in fleet_plan(newest_build, task, model, per_day, metric, limit)
                       if row["boundary"] == "gpu_only" and row["row_id"] is not None]
            assert planned
            for row in planned:
                point = raw[row["row_id"]]
                assert (row["latency_ms"], row["measured_concurrency"], row["units_per_second"],
                        row["gpu_power_watts_total"]) == pytest.approx(
                    (point[metric], point["concurrency"], point["tokens_per_second"], point["power_w"]), rel=1e-12)
