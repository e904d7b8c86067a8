"""estimate and compare against an independent computation from the raw upstream JSON in ../shared
(newest snapshot): the figures, the snapshot they name, Wh per response, and "A uses k× B" per output token
and per response, diffusion pairs only of the same workload."""

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import NEWEST, read_json, upstream_rows

from pipeline.reference_tables import load_boundary_factors
from pipeline.errors import PipelineError
from pipeline.paths import Paths
from pipeline.query import compare

CLI = str(Path(sys.executable).with_name("energy-index"))
TASK = "lm-arena-chat"
DEADLINE_MS = 500  # the leaderboard's default median ITL ceiling, which the newest build uses
# The leaderboard's default batch-latency ceilings, which the newest build uses for the diffusion tasks.
CEILING_S = {"text-to-image": 30, "text-to-video": 300}
# The pair the issue names: per output token A uses more than B on some GPU, per response less.
LONG_AND_SHORT = ("meta-llama/Llama-3.1-70B-Instruct", "nvidia/NVIDIA-Nemotron-Nano-12B-v2")


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


def raw_energy(row: dict[str, Any]) -> float:
    """Energy per unit as the raw JSON gives it: per output token, per image or per video."""
    return next(row[key] for key in ("energy_per_token_joules", "energy_per_image_joules", "energy_per_video_joules")
                if key in row)


def raw_index(task: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Each model's lowest-energy configuration on each GPU within the task's latency limit, from the raw JSON
    alone (the first in file order on a tie)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for row in upstream_rows(NEWEST, task):
        within = (row["batch_latency_s"] <= CEILING_S[task] if task in CEILING_S
                  else row["median_itl_ms"] <= DEADLINE_MS)
        key = (row["model_id"], row["gpu_model"])
        if within and (key not in best or raw_energy(row) < raw_energy(best[key])):
            best[key] = row
    return best


def raw_workload_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """What differs between two diffusion configurations' workloads, A's first, in the view's words."""
    def size(row: dict[str, Any]) -> str | None:
        kind = "image" if "image_width" in row else "video"
        return f"{row[f'{kind}_width']}x{row[f'{kind}_height']}" if f"{kind}_width" in row else None

    parts = [(name, value(a), value(b)) for name, value in (
        ("steps", lambda row: row.get("inference_steps")), ("resolution", size),
        ("frames", lambda row: row.get("num_frames")), ("fps", lambda row: row.get("fps")))]
    return "; ".join(f"{name} {x} vs {y}" for name, x, y in parts if x != y) or None


def raw_comparisons() -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Every ordered pair of models with an index row on one task and GPU: k per unit and per response (the
    upstream's energy per request; one image or video a response), whether they lie on opposite sides of 1,
    and what differs between two diffusion workloads."""
    pairs = {}
    for task in sorted(path.stem for path in (NEWEST / "tasks").glob("*.json")):
        best = raw_index(task)
        for (a, gpu), row_a in best.items():
            for (b, other_gpu), row_b in best.items():
                if other_gpu != gpu or b == a:
                    continue
                per_unit = raw_energy(row_a) / raw_energy(row_b)
                per_response = (row_a["energy_per_request_joules"] / row_b["energy_per_request_joules"]
                                if "energy_per_request_joules" in row_a else per_unit)
                pairs[task, gpu, a, b] = {
                    "per_unit": per_unit, "per_response": per_response,
                    "reversed": (per_unit - 1) * (per_response - 1) < 0,
                    "difference": raw_workload_difference(row_a, row_b) if task in CEILING_S else None,
                    "tokens": (row_a.get("avg_output_len"), row_b.get("avg_output_len"))}
    return pairs


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


def test_model_comparisons_give_k_per_token_and_per_response_and_pair_only_the_same_diffusion_workload(
        newest_build: Paths) -> None:
    expected = raw_comparisons()
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        rows = connection.execute("""
            select task, gpu, model_a, model_b, energy_ratio, energy_ratio_low, energy_ratio_high,
                   per_response_ratio, per_response_ratio_low, per_response_ratio_high, is_per_response_reversed,
                   workload_difference, avg_output_tokens_a, avg_output_tokens_b
            from model_comparisons where boundary = 'gpu_only'""").fetchall()
    view = {row[:4]: row[4:] for row in rows}
    assert view.keys() == expected.keys()
    # the raw JSON has both cases, so the assertions below are not vacuous
    assert any(pair["reversed"] for pair in expected.values())
    assert any(pair["difference"] for pair in expected.values())
    assert any(pair["difference"] is None for key, pair in expected.items() if key[0] in CEILING_S)
    for key, pair in expected.items():
        (k, k_low, k_high, per_response, per_response_low, per_response_high, is_reversed, difference,
         tokens_a, tokens_b) = view[key]
        assert difference == pair["difference"], key
        if difference is not None:  # different workloads: no k either way, nor a verdict on their directions
            assert (k, k_low, k_high, per_response, per_response_low, per_response_high, is_reversed) == (None,) * 7
            continue
        assert k == pytest.approx(pair["per_unit"], rel=1e-12), key
        assert per_response == pytest.approx(pair["per_response"], rel=1e-9), key
        assert k_low <= k <= k_high and per_response_low <= per_response <= per_response_high
        assert is_reversed == pair["reversed"], key
        if key[0] not in CEILING_S:
            assert (tokens_a, tokens_b) == pytest.approx(pair["tokens"], rel=1e-12)


def test_compare_says_both_ratios_and_when_they_point_opposite_ways(newest_build: Paths) -> None:
    a, b = LONG_AND_SHORT
    expected = raw_comparisons()
    document = run_json(newest_build, "compare", "--task", TASK, a, b, "--boundary", "gpu_only")
    gpus = [row["gpu"] for row in document["comparisons"]]
    assert gpus == sorted(gpu for task, gpu, x, y in expected if (task, x, y) == (TASK, a, b))
    assert {"energy_ratio", "per_response_ratio"} <= document["ratios"].keys()
    for row in document["comparisons"]:
        pair = expected[TASK, row["gpu"], a, b]
        assert row["energy_ratio"] == pytest.approx(pair["per_unit"], rel=1e-12)
        assert row["per_response_ratio"] == pytest.approx(pair["per_response"], rel=1e-9)
        assert row["per_response_ratio_low"] <= row["per_response_ratio"] <= row["per_response_ratio_high"]
        assert row["is_per_response_reversed"] is pair["reversed"]
    reversed_on = [gpu for gpu in gpus if expected[TASK, gpu, a, b]["reversed"]]
    assert reversed_on, "the raw JSON no longer has this pair pointing opposite ways on any GPU"
    text = subprocess.run([CLI, "compare", "--out", str(newest_build.out), "--task", TASK, a, b],
                          capture_output=True, text=True, timeout=120).stdout
    for gpu in gpus:
        pair = expected[TASK, gpu, a, b]
        assert f"  {gpu}, gpu_only: A uses {pair['per_unit']:.3g}× B per output token and " \
               f"{pair['per_response']:.3g}× B per response" in text
        said = f"  {gpu}: per output token and per response point opposite ways" in text
        assert said is pair["reversed"], gpu
    tokens_a, tokens_b = expected[TASK, reversed_on[0], a, b]["tokens"]
    assert f"({tokens_a:,.0f} against {tokens_b:,.0f} mean output tokens, A against B)" in text


def test_compare_gives_no_k_for_diffusion_configurations_of_different_workloads(newest_build: Paths) -> None:
    expected = raw_comparisons()
    task, gpu, a, b = next(key for key, pair in expected.items()
                           if pair["difference"] and "steps" in pair["difference"])
    document = run_json(newest_build, "compare", "--task", task, a, b, "--gpu", gpu)
    assert [row["boundary"] for row in document["comparisons"]] == ["gpu_only", "server", "facility"]
    for row in document["comparisons"]:
        assert row["workload_difference"] == expected[task, gpu, a, b]["difference"]
        assert row["energy_ratio"] is None and row["per_response_ratio"] is None
        assert row["wh_per_unit_a"] > 0 and row["wh_per_unit_b"] > 0  # the figures stand; only k is withheld
    text = subprocess.run([CLI, "compare", "--out", str(newest_build.out), "--task", task, a, b, "--gpu", gpu],
                          capture_output=True, text=True, timeout=120).stdout
    assert (f"  {gpu}, gpu_only: no k: A and B were measured on different workloads, A's against B's: "
            f"{expected[task, gpu, a, b]['difference']};") in text
    assert "×" not in text
    # a pair of the same workload keeps its k
    task, gpu, a, b = next(key for key, pair in expected.items()
                           if key[0] in CEILING_S and pair["difference"] is None)
    (row,) = run_json(newest_build, "compare", "--task", task, a, b, "--gpu", gpu,
                      "--boundary", "gpu_only")["comparisons"]
    assert row["workload_difference"] is None
    assert row["energy_ratio"] == pytest.approx(expected[task, gpu, a, b]["per_unit"], rel=1e-12)


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
