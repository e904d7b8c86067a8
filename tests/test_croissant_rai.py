"""croissant.json speaks Croissant RAI 1.0 beside Croissant 1.0: conformance declared, the RAI properties
set from the source card and the snapshot, and mlcroissant still validates it and loads records."""

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import NEWEST, read_json, write_once

from pipeline.paths import Paths
from pipeline.source_card import load_source_card

BIN = Path(sys.executable).parent
# The RAI 1.0 properties the release sets (docs/release.md), as the RAI specification spells them.
RAI_PROPERTIES = ("rai:dataCollection", "rai:dataCollectionType", "rai:dataCollectionRawData",
                  "rai:dataCollectionTimeframe", "rai:dataPreprocessingProtocol", "rai:dataLimitations",
                  "rai:dataBiases", "rai:dataUseCases", "rai:personalSensitiveInformation",
                  "rai:dataReleaseMaintenancePlan")


@pytest.fixture(scope="module")
def release(newest_build: Paths) -> Path:
    write_once(newest_build, "release")
    return newest_build.out / "release" / "2026-02-16-7885788"


@pytest.fixture(scope="module")
def croissant(release: Path) -> dict:
    return json.loads((release / "croissant.json").read_text(encoding="utf-8"))


def test_rai_conformance_is_declared_beside_croissant(croissant: dict) -> None:
    assert croissant["conformsTo"] == ["http://mlcommons.org/croissant/1.0", "http://mlcommons.org/croissant/RAI/1.0"]
    assert croissant["@context"]["rai"] == "http://mlcommons.org/croissant/RAI/"


def test_the_rai_properties_come_from_the_source_card_and_the_snapshot(croissant: dict) -> None:
    assert all(croissant.get(key) for key in RAI_PROPERTIES), [key for key in RAI_PROPERTIES if not croissant.get(key)]
    upstream = read_json(NEWEST / "snapshot.json")
    card = load_source_card()
    assert croissant["rai:dataCollectionType"] == ["Direct measurement", "Secondary Data analysis"]
    assert upstream["commit"] in croissant["rai:dataCollectionRawData"]
    commit_day = datetime.fromisoformat(upstream["commit_time"]).astimezone(timezone.utc).date().isoformat()
    assert f"({commit_day})" in croissant["rai:dataCollectionRawData"]
    assert croissant["rai:dataCollectionTimeframe"] == [card.source["released"],
                                                         read_json(NEWEST / "index.json")["last_updated"]]
    assert card.token.method in croissant["rai:dataCollection"]
    limitations = " ".join(croissant["rai:dataLimitations"])
    assert croissant["rai:dataLimitations"][0].startswith(card.index.caveat)
    for named in ("H100", "B200", "vLLM 0.11.1", "xDiT", "output tokens", "boundary"):
        assert named in limitations, named
    preprocessing = " ".join(croissant["rai:dataPreprocessingProtocol"])
    assert "pandera" in preprocessing and "repeats" in preprocessing.lower()
    assert card.source["name"] in croissant["rai:dataReleaseMaintenancePlan"]


@pytest.mark.validators
def test_mlcroissant_validates_reads_the_rai_properties_and_loads_records(release: Path) -> None:
    mlcroissant = pytest.importorskip("mlcroissant", reason="the interop extra is not installed (make test installs it)")
    validated = subprocess.run([str(BIN / "mlcroissant"), "validate", "--jsonld", "croissant.json"],
                               capture_output=True, text=True, timeout=300, cwd=release)
    assert validated.returncode == 0, validated.stderr[-2000:]
    assert "Done." in validated.stderr and "WARNING" not in validated.stderr
    metadata = mlcroissant.Dataset(jsonld=release / "croissant.json").metadata
    assert metadata.data_collection_type == ["Direct measurement", "Secondary Data analysis"]
    assert metadata.data_biases and metadata.data_use_cases and metadata.data_limitations
    assert metadata.data_release_maintenance_plan.startswith("Follows the upstream")
    loaded = subprocess.run([str(BIN / "mlcroissant"), "load", "--jsonld", "croissant.json", "--record_set",
                             "index_boundaries", "--num_records", "3"], capture_output=True, text=True, timeout=300,
                            cwd=release)
    assert loaded.returncode == 0 and loaded.stdout.count("index_boundaries/wh_per_unit_central") == 3
