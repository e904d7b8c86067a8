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


def _estimate(build: Paths, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "estimate", "--out", str(build.out), "--task", "lm-arena-chat", "--model",
                           "Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "100", *options],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("boundary", ["gpu_only", "facility"])
def test_operational_carbon_is_the_estimates_energy_times_the_grid_intensity(newest_build: Paths, boundary: str) -> None:
    ran = _estimate(newest_build, "--boundary", boundary, "--carbon-intensity", "412.5", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    carbon = result["operational_carbon"]
    rows = [row for row in result["deployments"] if row["wh_per_unit"] is not None]
    assert rows and carbon["unit"] == "gCO2e per million output tokens"
    # gCO2e per unit = Wh per unit × 412.5 gCO2e per kWh ÷ 1,000 Wh per kWh
    assert math.isclose(carbon["min_g_per_unit"], min(r["wh_per_unit"] for r in rows) * 0.4125, rel_tol=1e-12)
    assert math.isclose(carbon["max_g_per_unit"], max(r["wh_per_unit"] for r in rows) * 0.4125, rel_tol=1e-12)
    assert math.isclose(carbon["low_g_per_unit"], min(r["boundary_wh_per_unit_low"] for r in rows) * 0.4125,
                        rel_tol=1e-12)
    assert math.isclose(carbon["high_g_per_unit"], max(r["boundary_wh_per_unit_high"] for r in rows) * 0.4125,
                        rel_tol=1e-12)
    assert (carbon["low_g_per_unit"] < carbon["high_g_per_unit"]) == (boundary != "gpu_only")
    assert "not included" in carbon["embodied"]
    text = _estimate(newest_build, "--boundary", boundary, "--carbon-intensity", "412.5")
    assert text.returncode == 0, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if "operational carbon" in line]
    assert f"{carbon['min_g_per_unit']:.4g} gCO2e per million output tokens" in line
    assert f"range {carbon['low_g_per_unit']:.4g} to {carbon['high_g_per_unit']:.4g}" in line
    assert "embodied emissions" in line and "not included" in line


def test_the_carbon_arithmetic_and_a_refused_intensity(newest_build: Paths) -> None:
    assert grams_per_unit(2000.0, 300.0) == 600.0  # 2 kWh at 300 g/kWh
    assert grams_per_unit(0.5, 1000.0) == 0.5
    refused = _estimate(newest_build, "--carbon-intensity", "-5")
    assert refused.returncode != 0 and "--carbon-intensity" in refused.stderr
    assert "operational_carbon" not in json.loads(_estimate(newest_build, "--format", "json").stdout)
