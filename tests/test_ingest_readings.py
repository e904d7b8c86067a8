"""The two readings of ingest give the same tables: the fast one (orjson, whole columns) and the strict
one (the standard library, row by row) that decides every file the fast one is not sure of. So do
one process and several."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import NEWEST

import pipeline.ingest as ingest_module
from pipeline.cli import main
from pipeline.ingest import TABLE_ORDER, ingest
from pipeline.paths import Paths


def _raw_copy(built: Paths, out: Path) -> tuple[Paths, str]:
    paths = Paths(out)
    shutil.copytree(built.out / "raw", paths.out / "raw", symlinks=True)
    snapshot_ids = sorted(p.name for p in (paths.out / "raw").iterdir() if p.is_dir())
    assert len(snapshot_ids) == 1
    return paths, snapshot_ids[0]


def _assert_same_tables(one: Paths, other: Paths, snapshot_id: str) -> None:
    for table in TABLE_ORDER:
        mine, theirs = pq.read_table(one.parquet_path(table, snapshot_id)), pq.read_table(other.parquet_path(table, snapshot_id))
        assert mine.num_rows == theirs.num_rows, table
        assert mine.equals(theirs), table


def test_strict_reading_gives_the_tables_the_fast_one_gives(snapshot_build, tmp_path, monkeypatch) -> None:
    _, built = snapshot_build
    strict, snapshot_id = _raw_copy(built, tmp_path / "strict")

    def not_sure(data: bytes) -> None:
        raise ingest_module._Irregular

    monkeypatch.setattr(ingest_module, "_parse_fast", not_sure)
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
