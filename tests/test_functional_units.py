"""Energy per functional unit (the release's energy_per_functional_unit, the R of an SCI for AI
calculation) and the estimate's operational carbon: the table is derived here again from the raw
upstream JSON and from the boundary view, and the carbon figures are the energy × the intensity given."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import NEWEST, read_json, write_once

from pipeline.carbon import grams_per_unit
from pipeline.paths import Paths
from pipeline.source_card import load_source_card

CLI = str(Path(sys.executable).with_name("energy-index"))
VALUES = ("kwh_per_functional_unit_low", "kwh_per_functional_unit_central", "kwh_per_functional_unit_high")


@pytest.fixture(scope="module")
def release(newest_build: Paths) -> Path:
    write_once(newest_build, "release")
    return newest_build.out / "release" / "2026-02-16-7885788"


@pytest.fixture(scope="module")
def table(release: Path) -> dict[tuple[str, str, str, str, str], dict]:
    rows = pq.read_table(release / "data" / "energy_per_functional_unit.parquet").to_pylist()
    keyed = {(r["task"], r["model_id"], r["gpu"], r["boundary"], r["functional_unit"]): r for r in rows}
    assert len(keyed) == len(rows)
    return keyed


def _gpu_only_from_raw_json() -> dict[tuple[str, str, str, str], float]:
    """kWh per functional unit of each model and GPU from the upstream's task files: the lowest energy
    of any entry within the leaderboard's default latency limit (what the index states it picks)."""
    card = load_source_card()
    expected = {}
    for task_file in sorted((NEWEST / "tasks").glob("*.json")):
        task = task_file.stem
        best: dict[tuple[str, str], dict] = {}
        for entry in read_json(task_file)["configurations"]:
            if "energy_per_token_joules" in entry:
                within, joules = entry["median_itl_ms"] <= card.token.default_itl_deadline_ms, "energy_per_token_joules"
            else:
                joules = next(key for key in entry if key.startswith("energy_per_") and key.endswith("_joules"))
                within = entry["batch_latency_s"] <= card.diffusion.default_batch_latency_ceiling_s[task]
            key = (entry["model_id"], entry["gpu_model"])
            if within and (key not in best or entry[joules] < best[key][joules]):
                best[key] = entry | {"joules_key": joules}
        for (model_id, gpu), entry in best.items():
            kwh = entry[entry["joules_key"]] / 3.6e6  # J per output token, image or video -> kWh
            unit = {"energy_per_token_joules": "output token", "energy_per_image_joules": "image",
                    "energy_per_video_joules": "video"}[entry["joules_key"]]
            expected[(task, model_id, gpu, unit)] = kwh
            if unit == "video":
                expected[(task, model_id, gpu, "video-second")] = kwh / (entry["num_frames"] / entry["fps"])
    return expected


def test_the_gpu_only_rows_are_the_raw_measurements_per_functional_unit(table: dict) -> None:
    expected = _gpu_only_from_raw_json()
    gpu_only = {(task, model, gpu, unit): row for (task, model, gpu, boundary, unit), row in table.items()
                if boundary == "gpu_only"}
    assert gpu_only.keys() == expected.keys()
    for key, kwh in expected.items():
        for column in VALUES:
            assert math.isclose(gpu_only[key][column], kwh, rel_tol=1e-12), (key, column)


def test_every_boundary_is_the_boundary_view_per_functional_unit(table: dict, release: Path) -> None:
    boundaries = pq.read_table(release / "data" / "index_boundaries.parquet").to_pylist()
    best = {(r["task"], r["model_id"], r["gpu"]): r
            for r in pq.read_table(release / "data" / "best_configurations.parquet").to_pylist()}
    assert {key[3] for key in table} == {"gpu_only", "server", "facility"}
    checked = 0
    for row in boundaries:
        configuration = best[(row["task"], row["model_id"], row["gpu"])]
        units = ({"output token": 1e6} if configuration["family"] == "token" else
                 {configuration["unit_label"]: 1.0} | (
                     {"video-second": configuration["num_frames"] / configuration["fps"]}
                     if configuration["num_frames"] is not None else {}))
        for unit, per_index_unit in units.items():
            ours = table[(row["task"], row["model_id"], row["gpu"], row["boundary"], unit)]
            for bound in ("low", "central", "high"):
                assert math.isclose(ours[f"kwh_per_functional_unit_{bound}"],
                                    row[f"wh_per_unit_{bound}"] / per_index_unit / 1000, rel_tol=1e-12)
            assert ours["kwh_per_functional_unit_low"] <= ours["kwh_per_functional_unit_central"] \
                <= ours["kwh_per_functional_unit_high"]
            checked += 1
    assert checked == len(table)


def test_the_release_declares_and_checksums_the_table(release: Path) -> None:
    package = json.loads((release / "datapackage.json").read_text())
    (resource,) = [r for r in package["resources"] if r["name"] == "energy-per-functional-unit"]
    fields = {f["name"]: f for f in resource["schema"]["fields"]}
    assert fields["kwh_per_functional_unit_central"]["unit"] == "kWh per functional unit"
    assert "assumptions" in resource["description"]
    sums = (release / "SHA256SUMS").read_text()
    assert "  data/energy_per_functional_unit.parquet\n" in sums and "  data/energy_per_functional_unit.csv\n" in sums


def _estimate(build: Paths, *options: str, question: tuple[str, ...] = ("--task", "lm-arena-chat", "--model",
              "Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "100")) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "estimate", "--out", str(build.out), *question, *options],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("boundary", ["gpu_only", "facility"])
def test_operational_carbon_is_the_estimates_energy_times_the_grid_intensity(newest_build: Paths, boundary: str) -> None:
    ran = _estimate(newest_build, "--boundary", boundary, "--carbon-intensity", "412.5", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    carbon = result["operational_carbon"]
    rows = [row for row in result["deployments"] if row["wh_per_unit"] is not None]
    assert rows and carbon["per_unit"]["unit"] == "gCO2e per million output tokens"
    # gCO2e per unit = Wh per unit × 412.5 gCO2e per kWh ÷ 1,000 Wh per kWh
    per_unit = carbon["per_unit"]
    assert math.isclose(per_unit["min"], min(r["wh_per_unit"] for r in rows) * 0.4125, rel_tol=1e-12)
    assert math.isclose(per_unit["max"], max(r["wh_per_unit"] for r in rows) * 0.4125, rel_tol=1e-12)
    assert math.isclose(per_unit["low"], result["range"]["low"] * 0.4125, rel_tol=1e-12)
    assert math.isclose(per_unit["high"], result["range"]["high"] * 0.4125, rel_tol=1e-12)
    assert (per_unit["low"] < per_unit["high"]) == (boundary != "gpu_only")
    assert carbon["spans"] == result["range"]["spans"] and "not included" in carbon["embodied"]
    text = _estimate(newest_build, "--boundary", boundary, "--carbon-intensity", "412.5")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    (heading,) = [number for number, line in enumerate(lines) if "operational carbon" in line]
    assert f", {boundary} boundary; each range is the energy range × the intensity, {carbon['spans']}" in lines[heading]
    assert "embodied emissions" in lines[heading] and "not included" in lines[heading]
    assert f"{per_unit['min']:.4g} gCO2e per million output tokens" in lines[heading + 1]


# lm-arena-chat, Qwen3-30B-A3B-Instruct-2507 on 2 H100s at concurrency 200: one deployment, interpolated
# towards a point measured twice, so the range (the repeats' spread) is wider than the figure.
REPEATED = ("--task", "lm-arena-chat", "--model", "Qwen/Qwen3-30B-A3B-Instruct-2507", "--gpu", "H100",
            "--concurrency", "200")


@pytest.mark.parametrize("boundary", ["gpu_only", "server"])
def test_the_carbon_range_is_the_energy_range_times_the_intensity_per_unit_response_and_1000(
        newest_build: Paths, boundary: str) -> None:
    ran = _estimate(newest_build, "--boundary", boundary, "--output-tokens", "400", "--carbon-intensity", "500",
                    "--format", "json", question=REPEATED)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    carbon, energy, response = result["operational_carbon"], result["range"], result["per_response"]
    # The repeat spread is kept: the range is wider than the one deployment's figure.
    assert energy["low"] < result["min_wh_per_unit"] == result["max_wh_per_unit"] < energy["high"]
    expected = {
        "per_unit": (result["min_wh_per_unit"], result["max_wh_per_unit"], energy["low"], energy["high"]),
        "per_response": (response["min_wh"], response["max_wh"], response["low"], response["high"]),
        "per_1000_responses": tuple(1000 * wh for wh in (response["min_wh"], response["max_wh"], response["low"],
                                                           response["high"])),
    }
    for key, figures in expected.items():
        got = tuple(carbon[key][name] for name in ("min", "max", "low", "high"))
        assert all(math.isclose(g, wh * 0.5, rel_tol=1e-12) for g, wh in zip(got, figures)), (key, got, figures)
    assert carbon["per_response"]["output_tokens"] == carbon["per_1000_responses"]["output_tokens"] == 400
    text = _estimate(newest_build, "--boundary", boundary, "--output-tokens", "400", "--carbon-intensity", "500",
                     question=REPEATED).stdout.splitlines()
    heading = next(number for number, line in enumerate(text) if "operational carbon" in line)
    assert text[heading + 1:] == [
        f"    per unit: {carbon['per_unit']['min']:.4g} gCO2e per million output tokens (range "
        f"{energy['low'] * 0.5:.4g} to {energy['high'] * 0.5:.4g})",
        f"    per response of 400 output tokens: {carbon['per_response']['min']:.4g} gCO2e per response (range "
        f"{response['low'] * 0.5:.4g} to {response['high'] * 0.5:.4g})",
        f"    per 1,000 responses: {carbon['per_1000_responses']['min']:.4g} gCO2e per 1,000 responses (range "
        f"{response['low'] * 500:.4g} to {response['high'] * 500:.4g})"]


def test_carbon_per_response_needs_a_token_tasks_length_and_is_per_image_in_a_diffusion_task(
        newest_build: Paths) -> None:
    tokens = json.loads(_estimate(newest_build, "--carbon-intensity", "300", "--format", "json").stdout)
    carbon = tokens["operational_carbon"]
    assert carbon["per_response"] is carbon["per_1000_responses"] is None
    assert "--output-tokens N" in carbon["per_response_missing"]
    image = _estimate(newest_build, "--carbon-intensity", "300", "--format", "json", question=(
        "--task", "text-to-image", "--model", "black-forest-labs/FLUX.1-dev", "--gpu", "H100", "--concurrency", "4"))
    result = json.loads(image.stdout)
    carbon = result["operational_carbon"]
    assert carbon["per_unit"]["unit"] == "gCO2e per image" and carbon["per_response"]["output"] == "one image a response"
    assert [carbon["per_response"][n] for n in ("low", "high")] == [carbon["per_unit"][n] for n in ("low", "high")]
    assert math.isclose(carbon["per_1000_responses"]["high"], result["range"]["high"] * 300, rel_tol=1e-12)


def test_a_grid_intensity_of_0_is_valid_and_gives_0(newest_build: Paths) -> None:
    ran = _estimate(newest_build, "--carbon-intensity", "0", "--output-tokens", "250", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    carbon = json.loads(ran.stdout)["operational_carbon"]
    assert carbon["carbon_intensity_g_per_kwh"] == 0
    assert {carbon[key][name] for key in ("per_unit", "per_response", "per_1000_responses")
            for name in ("min", "max", "low", "high")} == {0.0}


def test_the_carbon_arithmetic_and_a_refused_intensity(newest_build: Paths) -> None:
    assert grams_per_unit(2000.0, 300.0) == 600.0  # 2 kWh at 300 g/kWh
    assert grams_per_unit(0.5, 1000.0) == 0.5
    refused = _estimate(newest_build, "--carbon-intensity", "-5")
    assert refused.returncode != 0 and "--carbon-intensity" in refused.stderr
    assert "operational_carbon" not in json.loads(_estimate(newest_build, "--format", "json").stdout)
