"""The release's SPDX 3.0.1 document (AI profile): valid against the JSON Schema and the SHACL shapes
spdx/spdx-spec publishes for 3.0.1 (copies in tests/spdx/, read offline), one AI package per index
model, and every energy quantity an index figure converted as docs/release.md states."""

import copy
import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import write_once

from pipeline.paths import Paths

SPDX_FILES = Path(__file__).with_name("spdx")
# How many of the index's unit make the reference workload, as docs/release.md states it.
WORKLOAD_UNITS = {"Wh per million output tokens": 1, "Wh per image": 1000, "Wh per video": 1000}
# The AI profile's conformance section requires these of every AI package (the SHACL shapes leave
# them optional, as the Software profile does).
AI_PROFILE_REQUIRED = ("suppliedBy", "software_downloadLocation", "software_packageVersion",
                       "software_primaryPurpose", "releaseTime")


@pytest.fixture(scope="module")
def release(newest_build: Paths) -> Path:
    write_once(newest_build, "release")
    return newest_build.out / "release" / "2026-02-16-7885788"


@pytest.fixture(scope="module")
def document(release: Path) -> dict:
    return json.loads((release / "energy-index.spdx.json").read_text(encoding="utf-8"))


def _packages(document: dict) -> list[dict]:
    return [element for element in document["@graph"] if element["type"] == "ai_AIPackage"]


@pytest.mark.validators
def test_the_document_validates_against_the_spdx_json_schema(document: dict) -> None:
    # jsonschema-rs: the Python jsonschema gives the same verdicts on this schema (whose every element is an
    # anyOf of SPDX's classes) in 16 s a document, jsonschema-rs in 0.1 s.
    jsonschema_rs = pytest.importorskip("jsonschema_rs", reason="the interop extra is not installed (make test installs it)")
    schema = json.loads((SPDX_FILES / "spdx-json-schema.json").read_text(encoding="utf-8"))
    validator = jsonschema_rs.Draft202012Validator(schema)
    errors = list(validator.iter_errors(document))
    assert not errors, "\n".join(f"{list(e.instance_path)}: {e.message[:300]}" for e in errors[:5])
    # And the schema holds an energy entry to its type: a quantity that is not a number is refused.
    damaged = copy.deepcopy(document)
    _packages(damaged)[0]["ai_energyConsumption"]["ai_inferenceEnergyConsumption"][0]["ai_energyQuantity"] = "many"
    assert list(validator.iter_errors(damaged))


@pytest.mark.validators
def test_the_document_conforms_to_the_spdx_shacl_shapes(document: dict) -> None:
    pyshacl = pytest.importorskip("pyshacl", reason="the interop extra is not installed (make test installs it)")
    import rdflib

    # The context the document names, read from the local copy: no test reaches the network.
    context = json.loads((SPDX_FILES / "spdx-context.jsonld").read_text(encoding="utf-8"))["@context"]
    assert document["@context"] == "https://spdx.org/rdf/3.0.1/spdx-context.jsonld"
    data = rdflib.Graph().parse(data=json.dumps({**document, "@context": context}), format="json-ld")
    model = rdflib.Graph().parse(SPDX_FILES / "spdx-model.ttl", format="turtle")
    conforms, _, report = pyshacl.validate(data, shacl_graph=model, ont_graph=model, inference="none")
    assert conforms, report[:3000]
    # The RDF holds every energy entry, as xsd:decimal, in kWh.
    ai = rdflib.Namespace("https://spdx.org/rdf/3.0.1/terms/AI/")
    quantities = list(data.objects(None, ai.energyQuantity))
    assert len(quantities) == sum(len(p["ai_energyConsumption"]["ai_inferenceEnergyConsumption"])
                                  for p in _packages(document))
    assert {q.datatype for q in quantities} == {rdflib.XSD.decimal}
    assert set(data.objects(None, ai.energyUnit)) == {ai["EnergyUnitType/kilowattHour"]}


def test_one_ai_package_per_index_model_with_the_profiles_required_properties(document: dict, release: Path) -> None:
    index_models = {row["model_id"] for path in (release / "index").glob("*/index.json")
                    for row in json.loads(path.read_text())["rows"]}
    packages = _packages(document)
    assert len(packages) == len(index_models) and {p["software_downloadLocation"].removeprefix(
        "https://huggingface.co/") for p in packages} == index_models
    for package in packages:
        assert all(package.get(key) for key in AI_PROFILE_REQUIRED), package["spdxId"]
    (spdx_document,) = [e for e in document["@graph"] if e["type"] == "SpdxDocument"]
    assert "ai" in spdx_document["profileConformance"]
    assert sorted(spdx_document["rootElement"]) == sorted(p["spdxId"] for p in packages)


def test_every_quantity_is_an_index_figure_for_the_stated_workload(document: dict, release: Path) -> None:
    # The index rows per model, in the document's order (task, then GPU), read from the index files.
    expected: dict[str, list[tuple[str, str, Decimal]]] = {}
    for path in sorted((release / "index").glob("*/index.json")):
        index = json.loads(path.read_text(), parse_float=Decimal)
        key = "wh_per_" + index["unit"].removeprefix("Wh per ").replace(" ", "_")
        for row in index["rows"]:
            quantity = row[key] * WORKLOAD_UNITS[index["unit"]] / 1000
            expected.setdefault(row["model_id"], []).append((path.parent.name, row["gpu"], quantity))
    for package in _packages(document):
        model_id = package["software_downloadLocation"].removeprefix("https://huggingface.co/")
        entries = package["ai_energyConsumption"]["ai_inferenceEnergyConsumption"]
        rows = sorted(expected[model_id])
        assert [Decimal(e["ai_energyQuantity"]) for e in entries] == [quantity for _, _, quantity in rows]
        assert {e["ai_energyUnit"] for e in entries} == {"kilowattHour"}
        # One fixed sentence per entry, in the same order, naming its task, GPU, boundary and commit.
        sentences = package["comment"].split(": ", 1)[1].split(" kWh: ")
        for (task, gpu, quantity), entry in zip(rows, entries):
            assert f"{entry['ai_energyQuantity']} kWh: GPU energy of " in package["comment"]
            assert f"for {task} (" in package["comment"] and f"on {gpu}, boundary gpu_only" in package["comment"]
        assert len(sentences) == len(entries) + 1
        assert package["comment"].count("ML.ENERGY Leaderboard commit 7885788e837b80ad172e02e6e8c47e8d0b85520e") \
            == len(entries)


def test_the_checksums_cover_the_spdx_document(release: Path) -> None:
    sums = (release / "SHA256SUMS").read_text().splitlines()
    assert any(line.endswith("  energy-index.spdx.json") for line in sums)


def test_the_standards_files_do_not_depend_on_the_time_zone(release: Path, newest_build: Paths, tmp_path: Path) -> None:
    # The upstream commit (09:48 UTC) falls on the day before in Honolulu: a date or time taken in the
    # session's zone would move the SPDX creation time and the Croissant raw-data sentence.
    copy = tmp_path / "out"
    shutil.copytree(newest_build.out, copy, symlinks=True, ignore=shutil.ignore_patterns("raw", "release", ".lock"))
    again = subprocess.run([str(Path(sys.executable).with_name("energy-index")), "release", "--out", str(copy)],
                           capture_output=True, text=True, timeout=300, env=os.environ | {"TZ": "Pacific/Honolulu"})
    assert again.returncode == 0, again.stderr
    for name in ("energy-index.spdx.json", "croissant.json", "SHA256SUMS"):
        assert (copy / "release" / release.name / name).read_bytes() == (release / name).read_bytes(), name


def test_an_index_unit_without_a_reference_workload_is_an_error_naming_it(release: Path) -> None:
    from datetime import datetime, timezone

    from pipeline.errors import PipelineError
    from pipeline.release import _texts
    from pipeline.spdx import index_entries, spdx_document

    entries = index_entries(release / "index")
    entries[0] = entries[0] | {"unit": "audio minute"}
    with pytest.raises(PipelineError, match=rf"index/{entries[0]['task']}/index.json: unit Wh per audio minute"):
        spdx_document("2026-02-16-7885788", "7885788", datetime(2026, 2, 16, tzinfo=timezone.utc), "2026-02-16",
                      entries, _texts())
