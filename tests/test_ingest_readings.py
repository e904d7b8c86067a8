"""Ingest gives the same tables however a file is read: decoded whole into the generated types, or
object by object (the way a file with unknown keys or refused values is read), in chunks of any
size, in any JSON layout."""

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import NEWEST, swept

import pipeline.ingest as ingest_module
import pipeline.upstream_json as upstream_json
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


def test_reading_object_by_object_gives_the_tables_typed_decoding_gives(snapshot_build, tmp_path, monkeypatch) -> None:
    """A file with an unknown key or a refused value is read object by object (unknown keys kept,
    every problem worded); for regular files both ways must give the same tables, on every snapshot."""
    _, built = snapshot_build
    by_object, snapshot_id = _raw_copy(built, tmp_path / "by-object")

    def irregular(name: str, data: bytes, file_type: object) -> None:
        raise upstream_json.Irregular

    monkeypatch.setattr(ingest_module, "decode", irregular)
    result = ingest(by_object, snapshot_id)
    assert len(result.read_by_object) == result.row_counts["tasks"] + result.row_counts["model_details"]
    _assert_same_tables(by_object, built, snapshot_id)


def test_the_newest_snapshot_is_read_by_typed_decoding(tmp_path) -> None:
    out = tmp_path / "out"
    assert main(["fetch", "--source", str(NEWEST), "--out", str(out)]) == 0
    result = ingest(Paths(out), "2026-02-16-7885788")
    assert result.read_by_object == []
    assert result.row_counts["output_length_histograms"] > 40_000


@pytest.mark.parametrize("processes", ["this one", pytest.param("workers", marks=pytest.mark.sweep)])
def test_detail_files_read_in_small_chunks_give_the_same_tables(newest_build, tmp_path, monkeypatch, processes) -> None:
    chunked, snapshot_id = _raw_copy(newest_build, tmp_path / "chunked")
    monkeypatch.setattr(ingest_module, "DETAIL_CHUNK_FILES", 7)
    if processes == "workers":
        monkeypatch.setattr(ingest_module, "PARALLEL_MIN_DETAIL_FILES", 1)
    ingest(chunked, snapshot_id)
    _assert_same_tables(chunked, newest_build, snapshot_id)


def test_task_files_read_together_or_one_by_one_give_the_same_files(newest_build, tmp_path, monkeypatch) -> None:
    """The shared build read the newest snapshot's seven task files as one group; one file a group
    (TASK_GROUP_BYTES below any file's size) gives the same Parquet files, byte for byte."""
    assert len(ingest_module._task_groups(["a", "b"], {"tasks/a.json": 10, "tasks/b.json": 10})) == 1
    one_by_one, snapshot_id = _raw_copy(newest_build, tmp_path / "one-by-one")
    monkeypatch.setattr(ingest_module, "TASK_GROUP_BYTES", 1)
    # A file the manifest does not size (its reading then names what is wrong) still has a group.
    assert ingest_module._task_groups(["a", "b", "c"], {"tasks/b.json": 5}) == [[(0, "a")], [(1, "b")], [(2, "c")]]
    ingest(one_by_one, snapshot_id)
    for table in ("token_configurations", "diffusion_configurations", "tasks"):
        mine, theirs = one_by_one.parquet_path(table, snapshot_id), newest_build.parquet_path(table, snapshot_id)
        assert mine.read_bytes() == theirs.read_bytes(), table


LAYOUTS = {
    "indent 4": {"indent": 4},
    "one line": {},
    "compact": {"separators": (",", ":")},
    "indent 2, keys sorted": {"indent": 2, "sort_keys": True},
    "indent 2, a row nested one level deeper": {"indent": 2, "nest": True},
}


@pytest.mark.parametrize("layout", swept(list(LAYOUTS), lambda layout: layout in ("compact", "indent 2, a row nested one level deeper")))
def test_any_layout_of_a_task_file_gives_the_same_tables(newest_build, tmp_path, layout: str) -> None:
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
            ingest(relaid, snapshot_id)
        return
    ingest(relaid, snapshot_id)
    # Only the snapshots table (file sizes) may tell the layouts apart.
    _assert_same_tables(relaid, newest_build, snapshot_id, tuple(t for t in TABLE_ORDER if t != "snapshots"))


def test_a_new_upstream_field_takes_one_dictionary_entry(source_copy: Path, tmp_path: Path, monkeypatch) -> None:
    """What docs/design.md promises: one entry in schemas/dictionary.toml and ingest reads the key
    into a typed, checked, described column instead of extra_fields."""
    import duckdb
    import msgspec

    import schemas
    from schemas import dictionary

    entries = dictionary.entries()
    columns = {**entries.tables["token_configurations"].columns, "zz_power_factor": dictionary.Column(upstream="optional")}
    fields = {**entries.fields, "zz_power_factor": dictionary.Field(
        type="float64", unit="ratio", description="A new upstream field.", gt=0, le=1)}
    tables = {**entries.tables, "token_configurations": msgspec.structs.replace(
        entries.tables["token_configurations"], columns=columns)}
    monkeypatch.setattr(dictionary, "entries", lambda: msgspec.structs.replace(entries, tables=tables, fields=fields))
    schemas.pandera_schema.cache_clear()
    schemas.arrow_schema.cache_clear()
    upstream_json.file_types.cache_clear()
    try:
        gpqa = source_copy / "tasks" / "gpqa.json"
        document = json.loads(gpqa.read_text())
        for row in document["configurations"]:
            row["zz_power_factor"] = 0.9
        gpqa.write_text(json.dumps(document, indent=2))
        (source_copy / "snapshot.json").unlink()  # a snapshot of its own, not the published one changed
        out = tmp_path / "out"
        assert main(["refresh", "--source", str(source_copy), "--out", str(out)]) == 0
        with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
            assert connection.execute(
                "select count(*), min(zz_power_factor), max(zz_power_factor), count(extra_fields)"
                " from token_configurations where task = 'gpqa'"
            ).fetchall() == [(len(document["configurations"]), 0.9, 0.9, 0)]
            assert connection.execute(
                "select count(zz_power_factor) from token_configurations where task <> 'gpqa'"
            ).fetchall() == [(0,)]
            assert connection.execute(
                "select unit, description from data_dictionary"
                " where object_name = 'token_configurations' and column_name = 'zz_power_factor'"
            ).fetchall() == [("ratio", "A new upstream field.")]
    finally:  # the next test's schemas come from the real dictionary again
        schemas.pandera_schema.cache_clear()
        schemas.arrow_schema.cache_clear()
        upstream_json.file_types.cache_clear()
