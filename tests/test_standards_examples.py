"""docs/release.md's loading examples for the standards files run on a real release: SPDX with rdflib,
Croissant with mlcroissant, the functional-unit table with DuckDB."""

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import PROJECT, write_once

from pipeline.paths import Paths

DOC = PROJECT / "docs" / "release.md"
EXAMPLE_RELEASE = "build/release/2026-02-16-7885788"


@pytest.fixture(scope="module")
def release(newest_build: Paths) -> Path:
    write_once(newest_build, "release")
    return newest_build.out / "release" / "2026-02-16-7885788"


def _run_example(first_line: str, release: Path, **replacements: str) -> dict:
    """The ```python block of docs/release.md starting with `first_line`, run with its release path pointed
    at `release` and each other path replaced; returns its namespace."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(rf"^```python\n({re.escape(first_line)}\n.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, f"docs/release.md has no example starting {first_line!r}"
    code = block.group(1).replace(EXAMPLE_RELEASE, str(release))
    for old, new in replacements.items():
        assert old in code
        code = code.replace(old, new)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 (our own docs)
    return namespace


@pytest.mark.validators
def test_the_spdx_example_reads_every_energy_entry_with_rdflib(release: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("rdflib", reason="the interop extra is not installed (make test installs it)")
    context = str(Path(__file__).with_name("spdx") / "spdx-context.jsonld")
    namespace = _run_example("import json, rdflib", release, **{'"spdx-context.jsonld"': repr(context)})
    entries = list(namespace["entries"])
    index_rows = pq.read_table(release / "data" / "best_configurations.parquet").num_rows
    assert len(entries) == index_rows
    assert capsys.readouterr().out.count(" kWh\n") == 3


@pytest.mark.validators
def test_the_croissant_example_reads_the_rai_limitations_and_the_records(release: Path) -> None:
    pytest.importorskip("mlcroissant", reason="the interop extra is not installed (make test installs it)")
    namespace = _run_example("import mlcroissant as mlc", release)
    table = pq.read_table(release / "data" / "energy_per_functional_unit.parquet")
    assert len(namespace["records"]) == table.num_rows
    assert namespace["dataset"].metadata.data_limitations[0].startswith("GPU energy only")


def test_the_functional_unit_example_gives_carbon_per_output_token(release: Path) -> None:
    namespace = _run_example("import duckdb", release)
    rows = namespace["per_token"]
    table = pq.read_table(release / "data" / "energy_per_functional_unit.parquet").to_pylist()
    facility = {(r["task"], r["model_id"], r["gpu"]): r for r in table
                if r["functional_unit"] == "output token" and r["boundary"] == "facility"}
    assert len(rows) == len(facility)
    for task, model_id, gpu, _, central, low, high in rows:
        row = facility[(task, model_id, gpu)]
        assert central == row["kwh_per_functional_unit_central"] * namespace["grid"]
        assert low <= central <= high
