"""Nothing is lost: every scalar value of every upstream JSON file of every snapshot is found again in
the Parquet tables, at the place it came from (or in an extra_fields column), and every histogram
comes back bin for bin."""

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
from conftest import SNAPSHOTS, refresh_args, snapshot_id

import schemas
from pipeline.cli import main
from pipeline.paths import Paths
from schemas.dictionary import json_paths


def leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, (*path, str(i)))]
    return [(path, value)]


class Tables:
    def __init__(self, paths: Paths, snapshot_id: str) -> None:
        self.rows = {
            table: pq.read_table(paths.parquet_path(table, snapshot_id)).to_pylist() for table in schemas.TABLE_NAMES
        }
        self._indexes: dict[tuple[str, tuple[str, ...]], dict[tuple[Any, ...], list[dict[str, Any]]]] = {}

    def all(self, table: str, **key: Any) -> list[dict[str, Any]]:
        names = tuple(sorted(key))
        index = self._indexes.get((table, names))
        if index is None:
            index = self._indexes[(table, names)] = {}
            for row in self.rows[table]:
                index.setdefault(tuple(row[name] for name in names), []).append(row)
        return index.get(tuple(key[name] for name in names), [])

    def one(self, table: str, **key: Any) -> dict[str, Any]:
        found = self.all(table, **key)
        assert len(found) == 1, (table, key, len(found))
        return found[0]


def check_object(obj: dict[str, Any], row: dict[str, Any], model: type, where: str, skip: set[str] = set()) -> int:
    """Every leaf of `obj` equals its column in `row`, or sits at the same path in row['extra_fields']."""
    columns = {path: column for column, path in json_paths(model.name).items()}
    extra = json.loads(row["extra_fields"]) if row.get("extra_fields") else {}
    checked = 0
    for path, value in leaves(obj):
        if path[0] in skip:
            continue
        if path in columns:
            stored = row[columns[path]]
        else:
            stored = extra
            for key in path:
                stored = stored[int(key)] if isinstance(stored, list) else stored[key]
        assert stored == value and type(stored) is type(value) or (
            isinstance(value, int) and not isinstance(value, bool) and stored == float(value)
        ), f"{where}: {'.'.join(path)} = {value!r}, stored {stored!r}"
        checked += 1
    return checked


def check_histogram(tables: Tables, distribution: dict[str, Any], where: str, **key: Any) -> None:
    bins = sorted(tables.all("output_length_histograms", **key), key=lambda row: row["bin_index"])
    assert [row["count"] for row in bins] == distribution["counts"], where
    assert [bins[0]["lower_edge"], *(row["upper_edge"] for row in bins)] == distribution["bins"], where


def test_every_upstream_value_is_in_the_parquet_tables(snapshot_build: tuple[Path, Paths]) -> None:
    snapshot, paths = snapshot_build
    tables = Tables(paths, snapshot_id(snapshot))
    checked = 0

    index = json.loads((snapshot / "index.json").read_text())
    # Stored as a Parquet date: the upstream's text is its ISO form.
    assert tables.one("snapshots", snapshot_id=snapshot_id(snapshot))["last_updated"].isoformat() == index["last_updated"]
    for position, task in enumerate(index["tasks"]):
        assert tables.one("tasks", task=task)["index_position"] == position
    for family, tasks in index["architectures"].items():
        assert {tables.one("tasks", task=task)["family"] for task in tasks} == {family}
    for model_id, fields in index["models"].items():
        checked += check_object(fields, tables.one("models", model_id=model_id), schemas.pandera_schema("models"), f"index.json {model_id}")

    for path in sorted((snapshot / "tasks").glob("*.json")):
        document = json.loads(path.read_text())
        task = document["task"]
        row = tables.one("tasks", task=task)
        assert (row["display_name"], row["file_architecture"]) == (document["task_display_name"], document.get("architecture"))
        family = "diffusion_configurations" if row["family"] == "diffusion" else "token_configurations"
        model = schemas.pandera_schema(family)
        assert len(tables.all(family, task=task)) == len(document["configurations"])
        for ordinal, entry in enumerate(document["configurations"]):
            stored = tables.one(family, task=task, source_ordinal=ordinal)
            checked += check_object(entry, stored, model, f"{path.name}[{ordinal}]")

    for path in sorted((snapshot / "models").glob("*.json")):
        document = json.loads(path.read_text())
        key = {"task": document["task"], "model_id": document["model_id"]}
        details = tables.one("model_details", **key)
        checked += check_object(
            document, details, schemas.pandera_schema("model_details"), path.name, skip={"configurations", "output_length_distribution"}
        )
        if "output_length_distribution" in document:
            check_histogram(
                tables, document["output_length_distribution"], path.name, scope="model", detail_ordinal=None, **key
            )
        for ordinal, entry in enumerate(document["configurations"]):
            stored = tables.one("model_detail_configurations", detail_ordinal=ordinal, **key)
            where = f"{path.name}[{ordinal}]"
            checked += check_object(
                entry, stored, schemas.pandera_schema("model_detail_configurations"), where, skip={"output_length_distribution"}
            )
            if "output_length_distribution" in entry:
                check_histogram(
                    tables, entry["output_length_distribution"], where, scope="configuration", detail_ordinal=ordinal, **key
                )
    assert checked > 40_000


def test_detail_rows_pair_with_task_file_rows(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        statuses = dict(connection.execute(
            "select match_status, count(*) from model_detail_matches where snapshot_id = ? group by 1",
            [SNAPSHOTS[-1].name],
        ).fetchall())
    assert statuses == {"matched": 1858}


def test_an_unused_detail_file_is_reported_not_dropped(tmp_path: Path) -> None:
    old = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
    out = tmp_path / "out"
    assert main(refresh_args(old, out)) == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        findings = connection.execute(
            "select table_name, row_key from audit_findings where rule = 'detail_row_unmatched'"
        ).fetchall()
    assert len(findings) == 10
    assert all(
        table == "model_detail_configurations"
        and row_key.startswith("video-chat:nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16:")
        and row_key.endswith("(detail file only)")
        for table, row_key in findings
    )
