"""The two readings of ingest give the same tables: the fast one (orjson, whole columns) and the strict
one (the standard library, row by row) that decides every file the fast one is not sure of. So do
one process and several."""

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import NEWEST

import pipeline.ingest as ingest_module
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.ingest import TABLE_ORDER, ingest
from pipeline.paths import Paths


def _raw_copy(built: Paths, out: Path) -> tuple[Paths, str]:
    paths = Paths(out)
    shutil.copytree(built.out / "raw", paths.out / "raw", symlinks=True)
    snapshot_ids = sorted(p.name for p in (paths.out / "raw").iterdir() if p.is_dir())
    assert len(snapshot_ids) == 1
    return paths, snapshot_ids[0]


def _assert_same_tables(one: Paths, other: Paths, snapshot_id: str, tables: tuple[str, ...] = TABLE_ORDER) -> None:
    for table in tables:
        mine, theirs = pq.read_table(one.parquet_path(table, snapshot_id)), pq.read_table(other.parquet_path(table, snapshot_id))
        assert mine.num_rows == theirs.num_rows, table
        assert mine.equals(theirs), table


def test_strict_reading_gives_the_tables_the_fast_one_gives(snapshot_build, tmp_path, monkeypatch) -> None:
    _, built = snapshot_build
    strict, snapshot_id = _raw_copy(built, tmp_path / "strict")

    def not_sure(data: bytes) -> None:
        raise ingest_module._Irregular

    monkeypatch.setattr(ingest_module, "_parse_fast", not_sure)
    monkeypatch.setattr(ingest_module, "_slice_task_file", lambda data: None)
    result = ingest(strict, snapshot_id, processes=1)
    assert len(result.strictly_read) == result.row_counts["tasks"] + result.row_counts["model_details"]
    _assert_same_tables(strict, built, snapshot_id)


def test_the_newest_snapshot_is_read_by_the_fast_reading(tmp_path) -> None:
    out = tmp_path / "out"
    assert main(["fetch", "--source", str(NEWEST), "--out", str(out)]) == 0
    result = ingest(Paths(out), "2026-02-16-7885788", processes=1)
    assert result.strictly_read == []
    assert result.row_counts["output_length_histograms"] > 40_000


def test_detail_files_split_across_processes_give_the_same_tables(newest_build, tmp_path, monkeypatch) -> None:
    split, snapshot_id = _raw_copy(newest_build, tmp_path / "split")
    monkeypatch.setattr(ingest_module, "DETAIL_CHUNK_FILES", 7)
    ingest(split, snapshot_id, processes=2)
    _assert_same_tables(split, newest_build, snapshot_id)


def test_task_files_read_in_many_slices_give_the_same_tables(newest_build, tmp_path, monkeypatch) -> None:
    sliced, snapshot_id = _raw_copy(newest_build, tmp_path / "sliced")
    task_file = sliced.raw_snapshot(snapshot_id) / "tasks" / "gpqa.json"
    assert ingest_module._slice_task_file(task_file.read_bytes()) is not None  # the upstream's layout
    monkeypatch.setattr(ingest_module, "TASK_SLICE_ROWS", 7)
    result = ingest(sliced, snapshot_id, processes=1)
    assert result.strictly_read == []
    _assert_same_tables(sliced, newest_build, snapshot_id)


LAYOUTS = {
    "indent 4": {"indent": 4},
    "one line": {},
    "compact": {"separators": (",", ":")},
    "indent 2, keys sorted": {"indent": 2, "sort_keys": True},
    "indent 2, a row nested one level deeper": {"indent": 2, "nest": True},
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_any_layout_of_a_task_file_gives_the_same_tables(newest_build, tmp_path, layout: str) -> None:
    """The slicing relies on the upstream's layout; another layout must be read whole, or strictly."""
    relaid, snapshot_id = _raw_copy(newest_build, tmp_path / "relaid")
    raw = relaid.raw_snapshot(snapshot_id)
    options = dict(LAYOUTS[layout])
    nest = options.pop("nest", False)
    for task_file in sorted((raw / "tasks").glob("*.json")):
        document = json.loads(task_file.read_text())
        if nest:  # the boundary bytes appear, but one level down: a list inside the list
            document["configurations"] = [document["configurations"]]
        task_file.write_text(json.dumps(document, **options))
    manifest_path = raw / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"]:
        data = (raw / entry["path"]).read_bytes()
        entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
    manifest_path.write_text(json.dumps(manifest, indent=2))
    if nest:
        with pytest.raises(PipelineError, match="must be a JSON object"):
            ingest(relaid, snapshot_id, processes=1)
        return
    ingest(relaid, snapshot_id, processes=1)
    # Only the snapshots table (file sizes) may tell the layouts apart.
    _assert_same_tables(relaid, newest_build, snapshot_id, tuple(t for t in TABLE_ORDER if t != "snapshots"))
