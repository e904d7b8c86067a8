"""No answer silently wrong at the edges: releases that compare across databases, stable refit floats,
hive datasets without a second snapshot column, typed CSV reads, no silent rollback of the index, a
no-op refresh that checks what it leaves published, damaged derived files recomputed, a no-op history
that does no work, counts and citations that hold, GPU names that cannot reach a path, and diffusion
provenance that says what the upstream does. Real processes, real snapshots, damage made here."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import NEWEST, PROJECT, SEED_AS_OF, SEED_RETRIEVED, SNAPSHOTS, UPSTREAM, tree_digest

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))
OLDER = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
DOCS = PROJECT / "docs" / "release.md"


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600)


def index_snapshot(out: Path) -> str:
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        return connection.execute("select snapshot_id from index_snapshot").fetchone()[0]


def release_of(build: Paths, out: Path) -> Path:
    """A release of `build`'s database, written in an OUT of its own (hard links to the build's files),
    so that the shared build is only read and its lock never taken."""
    generation = out / "current"
    generation.mkdir(parents=True)
    os.link(build.database, generation / "energy_index.duckdb")
    shutil.copytree(build.index_dir, generation / "index", copy_function=os.link)
    # What was published of those files, which release checks them against first.
    recorded = json.loads((build.current / "published-files.json").read_text())["files"]
    linked = {name: entry for name, entry in recorded.items() if name.split("/")[0] in ("energy_index.duckdb", "index")}
    (generation / "published-files.json").write_text(json.dumps({"files": linked}))
    made = cli("release", "--out", out)
    assert made.returncode == 0, made.stderr
    return out / "release" / NEWEST.name


@pytest.fixture(scope="module")
def releases(newest_build: Paths, history_build: Paths, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("releases")
    return release_of(newest_build, root / "one"), release_of(history_build, root / "eleven")


def test_3_a_release_has_the_same_bytes_whatever_else_the_database_holds(releases: tuple[Path, Path]) -> None:
    one, eleven = releases
    files = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(eleven).as_posix() for p in eleven.rglob("*") if p.is_file())
    differing = [name for name in files if (one / name).read_bytes() != (eleven / name).read_bytes()]
    # CHANGES.md lists the changes since the snapshot before, which a one-snapshot database lacks.
    assert differing == ["CHANGES.md", "SHA256SUMS"]

    def sums(release: Path) -> list[str]:
        return [line for line in (release / "SHA256SUMS").read_text().splitlines() if not line.endswith("  CHANGES.md")]

    assert sums(one) == sums(eleven) and len(sums(one)) == len(files) - 2


def test_3_the_ecologits_refit_gives_the_same_floats_run_after_run(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        connection.execute("set threads = 4")
        results = {
            tuple(connection.execute("select * from ecologits_refit order by all").fetchall()) for _ in range(20)
        }
    assert len(results) == 1 and len(next(iter(results))) > 50


@pytest.mark.parametrize("table", ["configuration_changes", "index_changes", "best_configuration_history", "token_configurations"])
def test_4_a_table_folder_reads_as_one_hive_dataset_with_the_tables_own_columns(history_build: Paths, table: str) -> None:
    polars = pytest.importorskip("polars", reason="the interop extra is not installed (make test installs it)")
    import pyarrow.dataset

    folder = history_build.parquet_dir / table
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        columns = [row[0] for row in connection.execute(f"describe {table}").fetchall()]
        rows = connection.execute(f"select count(*) from {table}").fetchone()[0]
        by_duckdb = connection.sql(
            f"select * from read_parquet('{folder}/*/*.parquet', hive_partitioning = true) limit 0").columns
    by_arrow = pyarrow.dataset.dataset(folder, format="parquet", partitioning="hive").to_table()
    by_polars = polars.read_parquet(folder, hive_partitioning=True)
    for read in (by_duckdb, by_arrow.column_names, by_polars.columns):
        assert sorted(read) == sorted(columns)
    assert by_arrow.num_rows == by_polars.height == rows > 0


def test_4_the_pair_tables_are_the_stored_tables_of_consecutive_pairs() -> None:
    from pipeline.build import STORED
    from pipeline.paths import PAIR_TABLES

    assert sorted(table for table, (_, kind) in STORED.items() if kind == "pair") == sorted(PAIR_TABLES)


def test_4_release_files_are_named_after_the_views_they_hold(releases: tuple[Path, Path], newest_build: Paths) -> None:
    one, _ = releases
    package = json.loads((one / "datapackage.json").read_text())
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        views = {row[0] for row in connection.execute("select view_name from duckdb_views() where not internal").fetchall()}
        tables = {row[0] for row in connection.execute("select table_name from duckdb_tables() where not internal").fetchall()}
    stems = sorted(Path(resource["path"]).stem for resource in package["resources"])
    assert stems == sorted(Path(p).stem for p in os.listdir(one / "data") if p.endswith(".csv"))
    for resource in package["resources"]:
        stem = Path(resource["path"]).stem
        kind = "view" if stem in views else "reference table" if stem in tables else None
        assert kind and resource["description"].startswith(f"The {kind} {stem} "), stem
    assert "configurations" in stems and "diffusion_configurations_current" in stems


def test_4_the_documented_typed_reads_give_every_release_csv_column_its_declared_type(releases: tuple[Path, Path]) -> None:
    import pandas as pd
    pl = pytest.importorskip("polars", reason="the interop extra is not installed (make test installs it)")

    one, _ = releases
    blocks = re.findall(r"^```python\n(.*?)^```", DOCS.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    block = next((block for block in blocks if "curves_pl" in block), None)
    assert block, f"{DOCS} has no typed CSV read"
    code = block.replace("build/release/2026-02-16-7885788", str(one))
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 (our own docs)
    assert namespace["curves_pl"].height == namespace["curves_pd"].shape[0] > 0
    # The same calls on every CSV of the release.
    polars_read = re.search(r"pl\.read_csv\(f\"\{release\}/data/efficiency_curves\.csv\", (.*)\)", code).group(1)
    pandas_read = re.search(r"pd\.read_csv\(f\"\{release\}/data/efficiency_curves\.csv\", (.*)\)", code).group(1)
    polars_types = {"integer": {"Int64"}, "number": {"Float64", "Int64"}, "boolean": {"Boolean"}, "string": {"String"}}
    pandas_types = {"integer": {"int64[pyarrow]"}, "number": {"double[pyarrow]", "int64[pyarrow]"},
                    "boolean": {"bool[pyarrow]"}, "string": {"string[pyarrow]"}}
    package = json.loads((one / "datapackage.json").read_text())
    wrong = []
    for resource in package["resources"]:
        path = one / resource["path"]
        by_polars = eval(f"pl.read_csv(path, {polars_read})", {"pl": pl, "path": path})  # noqa: S307
        by_pandas = eval(f"pd.read_csv(path, {pandas_read})", {"pd": pd, "path": path})  # noqa: S307
        for field in resource["schema"]["fields"]:
            name, declared = field["name"], field["type"]
            if str(by_polars.schema[name]) not in polars_types[declared]:
                wrong.append(f"polars {resource['path']}:{name} {declared} -> {by_polars.schema[name]}")
            if str(by_pandas.dtypes[name]) not in pandas_types[declared]:
                wrong.append(f"pandas {resource['path']}:{name} {declared} -> {by_pandas.dtypes[name]}")
    assert wrong == []


def test_5_refreshing_an_older_snapshot_keeps_the_newer_index_unless_asked(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    older = cli("refresh", "--source", OLDER, "--out", out)
    assert older.returncode == 0, older.stderr
    assert index_snapshot(out) == NEWEST.name
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
    assert index_snapshot(out) == OLDER.name and "is older than" not in rollback.stderr
    forward = cli("refresh", "--source", NEWEST, "--out", out)
    assert forward.returncode == 0 and index_snapshot(out) == NEWEST.name


def test_6_a_no_op_refresh_finds_damaged_published_files_and_rebuilds_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("refresh", "--source", NEWEST, "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert cli(*args).returncode == 0
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
    assert index_snapshot(out) == NEWEST.name
    assert tree_digest(out, "index") == published
    assert "nothing to do" in cli(*args).stderr
    # Without the record of what was published nothing can be vouched for: built again, and said.
    (out / "current" / "published-files.json").unlink()
    unknown = cli(*args)
    assert unknown.returncode == 0 and "published-files.json is missing or unreadable" in unknown.stderr
    assert "nothing to do" not in unknown.stderr and tree_digest(out, "index") == published


def test_6_a_damaged_ingested_file_is_ingested_again_or_named_when_it_cannot_be(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("refresh", "--source", OLDER, "--out", out).returncode == 0
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


def test_9_an_unreadable_derived_file_is_computed_again_with_a_warning(history_build: Paths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(history_build.out, out, symlinks=True)
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


def test_13_history_with_nothing_changed_does_no_work(history_build: Paths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(history_build.out, out, symlinks=True)
    # Everything but the fetch's pointer to the last snapshot it read (and the lock).
    def mtimes() -> dict[Path, int]:
        return {p: p.lstat().st_mtime_ns for p in out.rglob("*") if p.name not in (".lock", "LATEST", "raw")}

    before = mtimes()
    rerun = cli("history", "--source", UPSTREAM, "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert rerun.returncode == 0, rerun.stderr
    assert "history: 11 snapshot(s) built and published" in rerun.stderr and "nothing to do" in rerun.stderr
    assert "ingest:" not in rerun.stderr and "build:" not in rerun.stderr
    assert mtimes() == before


def test_14_every_count_the_docs_state_is_the_builds(history_build: Paths) -> None:
    from pipeline.build import view_files
    from schemas import TABLES

    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        tables = connection.execute("select count(*) from duckdb_tables() where not internal").fetchone()[0]
        views = connection.execute("select count(*) from duckdb_views() where not internal").fetchone()[0]
    truth = {"views and macros": len(view_files()), "tables": tables, "views": views, "ingested tables": len(TABLES)}
    stated = []
    for path in [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        stated += [(path.name, "views and macros", int(n)) for n in re.findall(r"\b(\d+) views and macros", text)]
        for n_tables, n_views in re.findall(r"\b(\d+) tables and (\d+) views", text):
            stated += [(path.name, "tables", int(n_tables)), (path.name, "views", int(n_views))]
        stated += [(path.name, "ingested tables", int(n)) for n in re.findall(r"rows in (\d+) tables", text)]
    assert stated, "no counts found"
    wrong = [f"{name}: {count} {what}, the build has {truth[what]}" for name, what, count in stated if count != truth[what]]
    assert wrong == []


def test_14_the_release_citation_names_every_author_of_the_paper(releases: tuple[Path, Path]) -> None:
    import yaml

    one, _ = releases
    citation = yaml.safe_load((one / "CITATION.cff").read_text())
    authors = [(a["given-names"], a["family-names"]) for a in citation["preferred-citation"]["authors"]]
    assert authors == [("Jae-Won", "Chung"), ("Jeff J.", "Ma"), ("Ruofan", "Wu"), ("Jiachen", "Liu"),
                       ("Oh Jun", "Kweon"), ("Yuxuan", "Xia"), ("Zhiyu", "Wu"), ("Mosharaf", "Chowdhury")]


@pytest.mark.parametrize("gpu", ["../../etc", "H100/../x", ".hidden", "H100\n"])
def test_14_a_gpu_name_that_is_not_a_name_is_refused_at_ingest(source_copy: Path, tmp_path: Path, gpu: str) -> None:
    path = source_copy / "tasks" / "gpqa.json"
    document = json.loads(path.read_text())
    document["configurations"][0]["gpu_model"] = gpu
    path.write_text(json.dumps(document))
    result = cli("refresh", "--source", source_copy, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert "gpu_model must be a GPU name" in result.stderr and repr(gpu) in result.stderr, result.stderr
    assert not (tmp_path / "out" / "energy_index.duckdb").exists()


# The diffusion files' provenance sentence before it was corrected, exactly as the export wrote it.
OLD_DIFFUSION_SENTENCE = ("{count} stable configurations: the leaderboard publishes the runs that passed its stability "
                          "filter; every run, including the unstable ones, is in the gated Hugging Face dataset "
                          "ml-energy/benchmark-v3")


def test_16_the_diffusion_files_change_in_their_provenance_sentence_only(newest_build: Paths) -> None:
    from pipeline.source_card import load_source_card

    before = json.loads((Path(__file__).parent / "index_sha256_before_diffusion_wording.json").read_text())
    sentence = load_source_card().diffusion.configurations
    assert "stability filter applies to LLM runs only" in sentence and "passed its" not in sentence
    pattern = re.compile(re.escape(json.dumps(sentence)).replace(re.escape("{count}"), r"(\d+)"))
    # version 1's files (the index format's version 2 and the JSON Schemas sit beside them in v2/ and schema/)
    files = {p.relative_to(newest_build.index_dir).as_posix(): p for p in newest_build.index_dir.rglob("*.json")
             if p.relative_to(newest_build.index_dir).parts[0] not in ("v2", "schema")}
    assert sorted(files) == sorted(before)
    changed = []
    for name, path in sorted(files.items()):
        text = path.read_text(encoding="utf-8")
        diffusion = name.split("/")[0] in ("text-to-image", "text-to-video")
        assert ("passed its stability filter" in text) != diffusion, name
        if diffusion:
            text, count = pattern.subn(lambda m: json.dumps(OLD_DIFFUSION_SENTENCE.format(count=m.group(1))), text)
            assert count == 1, name
            changed.append(name)
        assert hashlib.sha256(text.encode()).hexdigest() == before[name], f"{name} changed beyond the sentence"
    assert len(changed) > 10
