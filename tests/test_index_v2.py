"""The index format's version 2 beside version 1 and the JSON Schemas of both (newest snapshot): every v2
file matches a v1 file and keeps its rows' keys and values; what v2 adds is checked against an
independent computation from the raw upstream JSON in ../shared; every exported file and the golden
file validate against their schema, and malformed files do not."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import NEWEST, SEED, read_json, upstream_rows

from pipeline.paths import Paths
from pipeline.reference_tables import energy_class_scale, load_boundary_factors, load_index_v2
from schemas.rules import RATED_BOARD_POWER_W

# an interop extra: without it these tests are skipped, as the other interop checks are
jsonschema = pytest.importorskip("jsonschema")

TOKEN_TASKS = ("gpqa", "image-chat", "lm-arena-chat", "sourcegraph-fim", "video-chat")


def v1_files(index_dir: Path) -> list[Path]:
    return sorted(p for p in index_dir.rglob("*.json") if p.relative_to(index_dir).parts[0] not in ("v2", "schema"))


def v2_rows(index_dir: Path, task: str) -> list[dict[str, Any]]:
    return read_json(index_dir / "v2" / task / "index.json")["rows"]


def test_one_v2_file_for_each_v1_index_and_model_file_keeping_v1_rows(newest_build: Paths) -> None:
    index_dir = newest_build.index_dir
    v1 = {p.relative_to(index_dir).as_posix() for p in v1_files(index_dir) if p.name != "tiers.json"}
    v2 = {p.relative_to(index_dir / "v2").as_posix() for p in (index_dir / "v2").rglob("*.json")}
    assert v1 == v2 and len(v2) > 60
    for name in sorted(v2):
        old, new = read_json(index_dir / name), read_json(index_dir / "v2" / name)
        assert new["version"] == "2.1" and old["version"] == "1"
        assert {key: value for key, value in new.items() if key not in ("version", "metric", "data_url", "rows", "best")} \
            == {key: value for key, value in old.items() if key not in ("version", "rows", "best")}
        pairs = zip(old["rows"], new["rows"]) if "rows" in old else (
            (old["best"][gpu], new["best"][gpu]) for gpu in old["best"])
        if "rows" in old:
            assert len(old["rows"]) == len(new["rows"])
        else:
            assert list(old["best"]) == list(new["best"])
        for old_row, new_row in pairs:
            # version 1's keys first, in order, with the same values
            assert list(new_row)[:len(old_row)] == list(old_row)
            assert {key: new_row[key] for key in old_row} == old_row
        stamp = new["metric"]
        assert stamp == {"format_version": "2.1", "unit": old["unit"], "denominator": old["unit"].removeprefix("Wh per "),
                         "boundary": "gpu_only", "energy_class_boundary": "facility",
                         "energy_class_scale": energy_class_scale().source}
        assert "ComparIA" in stamp["energy_class_scale"] and "0397ea6" in stamp["energy_class_scale"]
        commit = read_json(NEWEST / "snapshot.json")["commit"]
        task = name.split("/")[0]
        assert new["data_url"] == f"https://raw.githubusercontent.com/ml-energy/leaderboard/{commit}/public/data/tasks/{task}.json"


def _raw_configuration(rows: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    """The upstream rows of one index row's configuration (its repeats), found in the raw JSON."""
    same = [r for r in rows if r["model_id"] == row["model_id"] and r["gpu_model"] == row["gpu"]
            and r["num_gpus"] == row["num_gpus"] and r["max_num_seqs"] == row["max_num_seqs"]
            and r["tensor_parallel"] == row["tensor_parallel"] and r["data_parallel"] == row["data_parallel"]
            and r.get("expert_parallel", 1) == row["expert_parallel"]]
    assert any(round(r["energy_per_token_joules"], 7) == row["joules_per_output_token"] for r in same), row["row_id"]
    return same


def test_v2_token_rows_against_the_raw_upstream_json(newest_build: Paths) -> None:
    _, classes = load_index_v2()
    validity, _ = load_index_v2()
    threshold = {code: value for _, code, _, value, _, _ in validity}
    factors = load_boundary_factors()
    (host,) = [f for f in factors if f["host_watts_per_gpu"] is not None]
    # the central factors (one row per boundary), and the facility factor's range over its sources
    central = {f["boundary"]: f["factor_central"] for f in factors if f["central"]}
    facility = [f for f in factors if f["boundary"] == "facility"]
    pue_low, pue_high = min(f["factor_low"] for f in facility), max(f["factor_high"] for f in facility)
    server_high = max(f["factor_high"] for f in factors if f["boundary"] == "server" and f["factor_high"])

    def letter_of(figure: float) -> str:
        return next(letter for letter, low, high, _ in classes if figure >= low and (high is None or figure < high))

    checked = gpu_only_letter_better = 0
    for task in TOKEN_TASKS:
        raw = upstream_rows(NEWEST, task)
        for row in v2_rows(newest_build.index_dir, task):
            repeats = _raw_configuration(raw, row)
            (chosen,) = [r for r in repeats if round(r["energy_per_token_joules"], 7) == row["joules_per_output_token"]][:1]
            wh = chosen["energy_per_token_joules"] * 1e6 / 3600
            own = round(1 + host["host_watts_per_gpu"] / RATED_BOARD_POWER_W[row["gpu"]], 2)
            # ComparIA's scale at the facility boundary: central, and the letters with the low and high factors
            letters = [letter_of(wh * own * pue_low), letter_of(wh * central["server"] * central["facility"]),
                       letter_of(wh * server_high * pue_high)]
            assert [row["energy_class_low"], row["energy_class"], row["energy_class_high"]] == letters, row["row_id"]
            assert row["energy_class_span"] == (letters[0] if letters[0] == letters[2] else "–".join(letters[::2]))
            assert row["energy_class_reason"] is None
            gpu_only_letter_better += letter_of(wh) < letters[1]
            # the range: the repeats' lowest and highest, around the figure; null with the code when measured once
            if len(repeats) == 1:
                assert row["range"] is None and "measured_once" in row["validity"]
            else:
                spread = [r["energy_per_token_joules"] * 1e6 / 3600 for r in repeats]
                assert row["range"] == {"low": round(min(spread), 2), "high": round(max(spread), 2)}
                assert row["range"]["low"] <= row["wh_per_million_output_tokens"] <= row["range"]["high"]
            ratio = chosen["avg_batch_size"] / chosen["max_num_seqs"]
            assert row["stability_ratio"] == round(ratio, 3)
            assert ("near_stability_rule" in row["validity"]) == (threshold["below_stability_rule"] <= ratio
                                                                  < threshold["near_stability_rule"])
            tail = chosen["p99_itl_ms"] / chosen["median_itl_ms"]
            assert ("latency_tail" in row["validity"]) == (tail > threshold["latency_tail"])
            margin = row["runner_up"]["margin_relative"] if row["runner_up"] else None
            assert ("narrow_margin" in row["validity"]) == (margin is not None and margin < threshold["narrow_margin"])
            # Wh per response at the mean output length
            output = chosen.get("avg_output_len") or chosen["energy_per_request_joules"] / chosen["energy_per_token_joules"]
            assert row["per_response"]["wh"] == pytest.approx(wh * output / 1e6, rel=1e-6, abs=1e-6)
            assert row["per_response"]["facility"]["central"] == pytest.approx(
                wh * central["server"] * central["facility"] * output / 1e6, rel=1e-6, abs=1e-6)
            assert row["per_response"]["server"]["low"] == pytest.approx(wh * own * output / 1e6, rel=1e-6, abs=1e-6)
            # the curve check: departure = figure / curve - 1, flagged beyond its bound; null without a usable fit
            curve = row["curve"]
            if curve["fit_status"] == "fit for use":
                # the curve's figure is rounded to 2 decimals: up to 0.005 Wh off
                assert curve["departure"] == pytest.approx(wh / curve["wh_per_unit"] - 1,
                                                           abs=1e-4 + 0.006 * wh / curve["wh_per_unit"] ** 2)
                assert ("departs_from_curve" in row["validity"]) == (abs(curve["departure"]) > curve["bound"])
                assert "no_usable_fit" not in row["validity"]
            else:
                assert curve["wh_per_unit"] is curve["departure"] is curve["bound"] is None
                assert "no_usable_fit" in row["validity"] and "departs_from_curve" not in row["validity"]
            # boundaries: gpu_only is the figure, ordered, each GPU its own server factor
            b = row["boundaries"]
            assert b["gpu_only"] == {level: row["wh_per_million_output_tokens"] for level in ("low", "central", "high")}
            assert b["server"]["factor"]["low"] == own
            assert b["server"]["factor"]["source_rows"]["low"] == host["id"]
            assert b["server"]["low"] == pytest.approx(wh * own, abs=0.006)
            for level in ("low", "central", "high"):
                assert b["gpu_only"][level] <= b["server"][level] <= b["facility"][level]
            for boundary in ("server", "facility"):
                assert b[boundary]["low"] <= b[boundary]["central"] <= b[boundary]["high"]
            checked += 1
    assert checked == 89
    # read at gpu_only, as version 2 did, 33 of the 89 rows would take a better letter than the scale gives
    assert gpu_only_letter_better == 33


def test_v2_diffusion_rows_have_no_class_and_say_why(newest_build: Paths) -> None:
    for task in ("text-to-image", "text-to-video"):
        unit = "image" if task == "text-to-image" else "video"
        for row in v2_rows(newest_build.index_dir, task):
            assert row["energy_class"] is None and "output tokens" in row["energy_class_reason"]
            assert row["energy_class_low"] is row["energy_class_high"] is row["energy_class_span"] is None
            assert row["per_response"]["facility"] == {key: pytest.approx(row["boundaries"]["facility"][key], abs=1e-4)
                                                       for key in ("low", "central", "high")}
            assert row["per_response"]["wh"] == pytest.approx(row[f"wh_per_{unit}"], abs=1e-4)
            assert row["stability_ratio"] is None and row["boundaries"]["gpu_only"]["central"] == row[f"wh_per_{unit}"]


@pytest.fixture(scope="module")
def validators(newest_build: Paths) -> dict[str, jsonschema.protocols.Validator]:
    schemas = {}
    for version in ("1", "2"):
        schema = read_json(newest_build.index_dir / "schema" / f"index-v{version}.schema.json")
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        schemas[version] = jsonschema.Draft202012Validator(schema)
    return schemas


def test_every_exported_file_and_the_golden_file_validate(newest_build: Paths, validators) -> None:
    index_dir = newest_build.index_dir
    files = [p for p in index_dir.rglob("*.json") if p.relative_to(index_dir).parts[0] != "schema"]
    assert len(files) > 130
    for path in files:
        version = "2" if path.relative_to(index_dir).parts[0] == "v2" else "1"
        errors = list(validators[version].iter_errors(read_json(path)))
        assert not errors, (path, jsonschema.exceptions.best_match(errors).message)
    validators["1"].validate(json.loads(SEED.read_text()))


def _damaged(document: dict[str, Any], where: str) -> dict[str, Any]:
    damaged = copy.deepcopy(document)
    row = damaged["rows"][0] if "rows" in damaged else next(iter(damaged["best"].values()))
    if where == "missing key":
        del row["row_id"]
    elif where == "unknown key":
        row["wh_per_token"] = 1.0
    elif where == "wrong type":
        row["num_gpus"] = "8"
    elif where == "v2 field in a v1 file":
        row["validity"] = []
    elif where == "bad class":
        row["energy_class"] = 7
    elif where == "header":
        damaged["version"] = "3"
    elif where == "format 2":  # a file of format 2, whose energy_class was read at gpu_only
        damaged["version"] = damaged["metric"]["format_version"] = "2"
    return damaged


@pytest.mark.parametrize("where", ["missing key", "unknown key", "wrong type", "v2 field in a v1 file", "header"])
def test_a_malformed_v1_file_fails(where: str, validators) -> None:
    golden = json.loads(SEED.read_text())
    assert not validators["1"].is_valid(_damaged(golden, where))


@pytest.mark.parametrize("where", ["missing key", "unknown key", "wrong type", "bad class", "header", "format 2"])
def test_a_malformed_v2_file_fails(where: str, newest_build: Paths, validators) -> None:
    document = read_json(newest_build.index_dir / "v2" / "lm-arena-chat" / "index.json")
    assert validators["2"].is_valid(document)
    assert not validators["2"].is_valid(_damaged(document, where))
