"""What a refresh decides, and that it decides right: nothing to do when nothing changed, a source changed under a
published commit refused (again on retry), an older snapshot kept out of the index unless asked, and damaged
published, ingested or derived files found and made whole."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import (
    BUILD_OUTPUTS,
    NEWEST,
    SEED_AS_OF,
    SEED_RETRIEVED,
    SNAPSHOTS,
    UPSTREAM,
    cli,
    copy_build,
    published_snapshot,
    tree_digest,
    writable_copy,
)

from pipeline.paths import Paths

OLDER = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
FEBRUARY_13 = next(path for path in SNAPSHOTS if path.name == "2026-02-13-82e15a4")


def add_configuration_on_a_new_gpu(source: Path) -> None:
    path = source / "tasks" / "gpqa.json"
    document = json.loads(path.read_text())
    row = dict(document["configurations"][0], gpu_model="H200")
    document["configurations"].append(row)
    path.write_text(json.dumps(document, indent=2))


def test_a_failed_refresh_fails_again_on_retry_and_a_fetched_one_is_published(tmp_path: Path, plain_build: Paths) -> None:
    out, source = copy_build(plain_build, tmp_path / "out"), writable_copy(NEWEST, tmp_path / "source")
    published = tree_digest(out, *BUILD_OUTPUTS)

    # A broken task file behind the published snapshot's snapshot.json: refused, and again on retry.
    (source / "tasks" / "gpqa.json").write_text("{broken")
    for _ in range(2):
        result = cli("refresh", "--source", source, "--out", out)
        assert result.returncode != 0
        assert "tasks/gpqa.json" in result.stderr and "differ from snapshot 2026-02-16-7885788" in result.stderr
        assert tree_digest(out, *BUILD_OUTPUTS) == published

    # A valid changed folder (a snapshot of its own) fetched by a run that then died: the retry publishes it.
    shutil.rmtree(source)
    writable_copy(NEWEST, source)
    (source / "snapshot.json").unlink()
    add_configuration_on_a_new_gpu(source)
    assert cli("fetch", "--source", source, "--out", out).returncode == 0
    assert published_snapshot(out) == NEWEST.name
    retry = cli("refresh", "--source", source, "--out", out)
    assert retry.returncode == 0, retry.stderr
    assert "nothing to do" not in retry.stderr
    assert published_snapshot(out).startswith("local-")
    again = cli("refresh", "--source", source, "--out", out)
    assert again.returncode == 0 and "nothing to do" in again.stderr


def test_changed_content_is_never_published_under_the_upstream_commit(tmp_path: Path, plain_build: Paths) -> None:
    out, source = copy_build(plain_build, tmp_path / "out"), writable_copy(NEWEST, tmp_path / "source")
    raw = tree_digest(out, "raw/2026-02-16-7885788")
    parquet = tree_digest(out, "parquet")
    add_configuration_on_a_new_gpu(source)
    result = cli("refresh", "--source", source, "--out", out)
    assert result.returncode != 0
    assert "these files differ from snapshot 2026-02-16-7885788 as it was published: tasks/gpqa.json" in result.stderr
    assert "remove or edit snapshot.json" in result.stderr
    assert tree_digest(out, "raw/2026-02-16-7885788") == raw
    assert tree_digest(out, "parquet") == parquet


@pytest.mark.sweep
def test_cp_a_of_a_newer_snapshot_over_the_source_is_seen(tmp_path: Path, snapshot_refresh) -> None:
    out = copy_build(snapshot_refresh(FEBRUARY_13), tmp_path / "out")
    source = writable_copy(FEBRUARY_13, tmp_path / "source")
    assert cli("refresh", "--source", source, "--out", out).returncode == 0
    assert published_snapshot(out) == FEBRUARY_13.name
    # cp -a keeps the newer snapshot's (old) modification times; only ctime and content change.
    for stale in source.rglob("*.json"):
        stale.unlink()
    subprocess.run(["cp", "-a", f"{NEWEST}/.", str(source)], check=True)
    result = cli("refresh", "--source", source, "--out", out)
    assert result.returncode == 0, result.stderr
    assert published_snapshot(out) == NEWEST.name


@pytest.mark.sweep
def test_refreshing_an_older_snapshot_keeps_the_newer_index_unless_asked(tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    older = cli("refresh", "--source", OLDER, "--out", out)
    assert older.returncode == 0, older.stderr
    assert published_snapshot(out) == NEWEST.name
    assert (f"refresh: {OLDER.name} is older than {NEWEST.name}, the newest snapshot in the database: it is in the "
            f"history now and the index stays on {NEWEST.name} (--as-index publishes {OLDER.name} as the index)") in older.stderr
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        assert connection.execute("select snapshot_id from snapshot_history order by position").fetchall() == [
            (OLDER.name,), (NEWEST.name,)]
    index = json.loads((out / "index" / "gpqa" / "index.json").read_text())
    assert index["source"]["compiled"] == "2026-02-16"
    again = cli("refresh", "--source", OLDER, "--out", out)
    assert again.returncode == 0 and "nothing to do" in again.stderr

    rollback = cli("refresh", "--source", OLDER, "--out", out, "--as-index")
    assert rollback.returncode == 0, rollback.stderr
    assert published_snapshot(out) == OLDER.name and "is older than" not in rollback.stderr
    forward = cli("refresh", "--source", NEWEST, "--out", out)
    assert forward.returncode == 0 and published_snapshot(out) == NEWEST.name


def test_a_no_op_refresh_finds_damaged_published_files_and_rebuilds_them(tmp_path: Path, newest_build: Paths) -> None:
    out = copy_build(newest_build, tmp_path / "out")  # what this refresh publishes
    args = ("refresh", "--source", NEWEST, "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    published = tree_digest(out, "index")
    # A truncated database, and an index file altered in place to the same size.
    database = (out / "energy_index.duckdb").resolve()
    with open(database, "r+b") as handle:
        handle.truncate(database.stat().st_size // 2)
    index_file = (out / "index" / "gpqa" / "index.json").resolve()
    text = index_file.read_bytes()
    digit = re.search(rb"[0-8]", text).start()
    index_file.write_bytes(text[:digit] + bytes([text[digit] + 1]) + text[digit + 1:])
    with pytest.raises(duckdb.Error):
        duckdb.connect(str(out / "energy_index.duckdb"), read_only=True).execute("select count(*) from configurations")

    repaired = cli(*args)
    assert repaired.returncode == 0, repaired.stderr
    assert "nothing to do" not in repaired.stderr
    assert re.search(r"refresh: warning: \S*energy_index\.duckdb: [\d,]+ bytes, published with [\d,]+; building it again",
                     repaired.stderr), repaired.stderr
    assert re.search(r"refresh: warning: \S*index/gpqa/index\.json: its content differs", repaired.stderr)
    assert published_snapshot(out) == NEWEST.name
    assert tree_digest(out, "index") == published
    assert "nothing to do" in cli(*args).stderr
    # Without the record of what was published nothing can be vouched for: built again, and said.
    (out / "current" / "published-files.json").unlink()
    unknown = cli(*args)
    assert unknown.returncode == 0 and "published-files.json is missing or unreadable" in unknown.stderr
    assert "nothing to do" not in unknown.stderr and tree_digest(out, "index") == published


@pytest.mark.sweep
def test_a_damaged_ingested_file_is_ingested_again_or_named_when_it_cannot_be(tmp_path: Path, snapshot_refresh) -> None:
    out = copy_build(snapshot_refresh(OLDER), tmp_path / "out")
    assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    damaged = Paths(out).parquet_path("models", OLDER.name).resolve()
    damaged.write_bytes(damaged.read_bytes()[:100])
    name = f"parquet/models/snapshot_id={OLDER.name}/data.parquet"
    manifest = out / "raw" / OLDER.name / "manifest.json"
    manifest.rename(tmp_path / "manifest.json")
    failed = cli("refresh", "--source", NEWEST, "--out", out)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1] == (
        f"energy-index: error: {out / 'current' / name}: 100 bytes, published with "
        f"{json.loads((out / 'current' / 'published-files.json').read_text())['files'][name][0]:,}, and snapshot "
        f"{OLDER.name} has no fetched copy in {out / 'raw'} to ingest again; fetch it (energy-index fetch --source ...) "
        "and run again")
    (tmp_path / "manifest.json").rename(manifest)
    repaired = cli("refresh", "--source", NEWEST, "--out", out)
    assert repaired.returncode == 0, repaired.stderr
    assert f"{name}: 100 bytes" in repaired.stderr and f"ingest: {OLDER.name}:" in repaired.stderr
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        assert connection.execute("select count(*) from models where snapshot_id = $id", {"id": OLDER.name}).fetchone()[0] > 0
    assert "nothing to do" in cli("refresh", "--source", NEWEST, "--out", out).stderr


def test_an_unreadable_derived_file_is_computed_again_with_a_warning(history_build: Paths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    copy_build(history_build, out)
    stored = Paths(out).parquet_path("index_changes", NEWEST.name).resolve()
    stored.write_bytes(b"not a parquet file at all")
    for attempt in range(2):
        built = cli("build", "--out", out)
        assert built.returncode == 0, built.stderr
        warned = "build: warning:" in built.stderr and "cannot be read" in built.stderr and "computing it again" in built.stderr
        assert warned == (attempt == 0), built.stderr
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as copy, \
            duckdb.connect(str(history_build.database), read_only=True) as original:
        query = "select * from index_changes order by all"
        assert copy.execute(query).fetchall() == original.execute(query).fetchall()


def test_history_with_nothing_changed_does_no_work(history_build: Paths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    copy_build(history_build, out)
    # Everything but the fetch's pointer to the last snapshot it read (and the lock).
    def mtimes() -> dict[Path, int]:
        return {p: p.lstat().st_mtime_ns for p in out.rglob("*") if p.name not in (".lock", "LATEST", "raw")}

    before = mtimes()
    rerun = cli("history", "--source", UPSTREAM, "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert rerun.returncode == 0, rerun.stderr
    assert "history: 11 snapshot(s) built and published" in rerun.stderr and "nothing to do" in rerun.stderr
    assert "ingest:" not in rerun.stderr and "build:" not in rerun.stderr
    assert mtimes() == before
