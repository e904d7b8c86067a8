"""estimate and compare against an independent computation from the raw upstream JSON in ../shared
(newest snapshot): the figures, the snapshot they name, Wh per response, and "A uses k× B"."""

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import NEWEST, read_json, upstream_rows

from pipeline.build import load_boundary_factors
from pipeline.errors import PipelineError
from pipeline.paths import Paths
from pipeline.query import compare

CLI = str(Path(sys.executable).with_name("energy-index"))
TASK = "lm-arena-chat"
DEADLINE_MS = 500  # the leaderboard's default median ITL ceiling, which the newest build uses


def run_json(paths: Paths, *arguments: str) -> dict[str, Any]:
    done = subprocess.run([CLI, *arguments, "--out", str(paths.out), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def raw_wh(row: dict[str, Any]) -> float:
    return row["energy_per_token_joules"] * 1e6 / 3600


def raw_best(model_id: str, gpu: str) -> dict[str, Any]:
    """The lowest-energy configuration within the deadline, read from the raw JSON alone."""
    within = [r for r in upstream_rows(NEWEST, TASK) if r["model_id"] == model_id and r["gpu_model"] == gpu
              and r["median_itl_ms"] <= DEADLINE_MS]
    return min(within, key=raw_wh)


def test_estimate_names_its_snapshot_and_matches_the_raw_json(newest_build: Paths) -> None:
    model, gpu = "Qwen/Qwen3-8B", "H100"
    points = sorted((r for r in upstream_rows(NEWEST, TASK) if r["model_id"] == model and r["gpu_model"] == gpu
                     and r["num_gpus"] == 1), key=lambda r: r["avg_batch_size"])
    assert len(points) >= 3 and len({r["weight_precision"] for r in points}) == 1
    lower, upper = points[1], points[2]
    # halfway in log concurrency between two measured points: the estimate is the mean of their figures
    concurrency = math.sqrt(lower["avg_batch_size"] * upper["avg_batch_size"])
    document = run_json(newest_build, "estimate", "--task", TASK, "--model", model, "--gpu", gpu, "--gpus", "1",
                        "--concurrency", repr(concurrency), "--output-tokens", "750", "--boundary", "server")
    snapshot = read_json(NEWEST / "snapshot.json")
    assert document["snapshot_id"] == NEWEST.name and document["commit"] == snapshot["commit"]
    expected_gpu = (raw_wh(lower) + raw_wh(upper)) / 2
    (server,) = [f for f in load_boundary_factors() if f["id"] == "google-gemini-server"]  # the central server row
    assert document["min_wh_per_unit"] == pytest.approx(expected_gpu * server["factor_central"], rel=1e-9)
    # the range at the chosen boundary: measured once, so the factors' range around the GPU figure
    assert document["range"]["boundary"] == "server"
    assert document["range"]["low"] == pytest.approx(expected_gpu * 1.21, rel=1e-9)
    assert document["range"]["high"] == pytest.approx(expected_gpu * 1.6, rel=1e-9)
    assert document["per_response"]["min_wh"] == pytest.approx(expected_gpu * 1.6 * 750 / 1e6, rel=1e-9)
    text = subprocess.run([CLI, "estimate", "--out", str(newest_build.out), "--task", TASK, "--model", model,
                           "--gpu", gpu, "--concurrency", "100"], capture_output=True, text=True, timeout=120).stdout
    assert f"snapshot {NEWEST.name} (upstream commit {snapshot['commit']})" in text


def test_compare_gives_k_and_its_interval_as_the_raw_json_does(newest_build: Paths) -> None:
    a, b = "Qwen/Qwen3-8B", "Qwen/Qwen3-14B"
    document = run_json(newest_build, "compare", "--task", TASK, "qwen3-8b", b)
    assert document["model_a"] == a and document["snapshot_id"] == NEWEST.name
    gpus = sorted({r["gpu_model"] for r in upstream_rows(NEWEST, TASK) if r["model_id"] == a}
                  & {r["gpu_model"] for r in upstream_rows(NEWEST, TASK) if r["model_id"] == b})
    assert [(row["gpu"], row["boundary"]) for row in document["comparisons"]] == [
        (gpu, boundary) for gpu in gpus for boundary in ("gpu_only", "server", "facility")]
    for row in document["comparisons"]:
        best_a, best_b = raw_best(a, row["gpu"]), raw_best(b, row["gpu"])
        k = raw_wh(best_a) / raw_wh(best_b)
        assert row["energy_ratio"] == pytest.approx(k, rel=1e-12)
        assert row["energy_ratio_low"] <= row["energy_ratio"] <= row["energy_ratio_high"]
        if row["boundary"] == "gpu_only":
            assert row["wh_per_unit_a"] == pytest.approx(raw_wh(best_a), rel=1e-12)
    # the view answers the same for SQL users
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        view = connection.execute("""
            select gpu, boundary, energy_ratio, energy_ratio_low, energy_ratio_high from model_comparisons
            where task = ? and model_a = ? and model_b = ? order by gpu, boundary_position""", [TASK, a, b]).fetchall()
    assert view == [(r["gpu"], r["boundary"], r["energy_ratio"], r["energy_ratio_low"], r["energy_ratio_high"])
                    for r in document["comparisons"]]


def test_compare_refuses_unknown_and_identical_models(newest_build: Paths) -> None:
    with pytest.raises(PipelineError, match="unknown model 'nosuch'"):
        compare(newest_build, TASK, "qwen3-8b", "nosuch")
    with pytest.raises(PipelineError, match="two different models"):
        compare(newest_build, TASK, "qwen3-8b", "Qwen/Qwen3-8B")


def test_compare_names_the_tasks_of_a_model_indexed_only_for_others(newest_build: Paths) -> None:
    # FLUX.1-dev is in the text-to-image index only; Qwen3-30B-A3B-Instruct-2507 (by its slug) in lm-arena-chat's.
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        tasks = dict(connection.execute("select model_id, list(distinct task order by task) from index_rows_v2 "
                                        "group by model_id").fetchall())
    assert tasks["black-forest-labs/FLUX.1-dev"] == ["text-to-image"]
    assert tasks["Qwen/Qwen3-30B-A3B-Instruct-2507"] == ["lm-arena-chat"]
    with pytest.raises(PipelineError) as refused:
        compare(newest_build, TASK, "qwen3-8b", "black-forest-labs/FLUX.1-dev")
    assert str(refused.value) == "black-forest-labs/FLUX.1-dev is not in the lm-arena-chat index; it is in: text-to-image"
    with pytest.raises(PipelineError) as refused:
        compare(newest_build, "gpqa", "qwen3-30b-a3b-instruct-2507", "Qwen/Qwen3-8B")
    assert str(refused.value) == ("Qwen/Qwen3-30B-A3B-Instruct-2507 is not in the gpqa index; it is in: "
                                  "lm-arena-chat")
