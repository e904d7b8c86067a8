"""A citable data release (issue 13): the two validators catalogues use accept a real release, a
rebuild gives the same bytes, the checksums hold and the data load in DuckDB and pyarrow."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import NEWEST, PROJECT, cli, write_once

from pipeline.paths import Paths
from pipeline.release import RELEASE_TABLES

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def release(history_build: Paths) -> Path:
    """The shared history build's release, made once: each xdist worker has its own module fixture, and
    two releases at once into one OUT would meet its lock."""
    folder = history_build.out / "release" / "2026-02-16-7885788"
    printed = write_once(history_build, "release")
    assert printed == "" or f"release: {folder}" in printed
    return folder


@pytest.mark.validators
def test_frictionless_validates_the_data_package(release: Path) -> None:
    pytest.importorskip("frictionless", reason="the interop extra is not installed (make test installs it)")
    result = subprocess.run([str(BIN / "frictionless"), "validate", "--json", "datapackage.json"],
                            capture_output=True, text=True, timeout=300, cwd=release)
    report = json.loads(result.stdout)
    assert report["valid"], json.dumps(report)[:2000]
    assert len(report["tasks"]) == len(RELEASE_TABLES)


@pytest.mark.validators
def test_mlcroissant_validates_the_croissant_metadata_and_loads_records(release: Path) -> None:
    pytest.importorskip("mlcroissant", reason="the interop extra is not installed (make test installs it)")
    validated = subprocess.run([str(BIN / "mlcroissant"), "validate", "--jsonld", "croissant.json"],
                               capture_output=True, text=True, timeout=300, cwd=release)
    assert validated.returncode == 0, validated.stderr[-2000:]
    assert "Done." in validated.stderr and "WARNING" not in validated.stderr
    loaded = subprocess.run([str(BIN / "mlcroissant"), "load", "--jsonld", "croissant.json", "--record_set",
                             "best_configurations", "--num_records", "3"], capture_output=True, text=True, timeout=300,
                            cwd=release)
    assert loaded.returncode == 0 and loaded.stdout.count("best_configurations/wh_per_unit") == 3


def test_metadata_carries_units_descriptions_licence_citation_and_checksums(release: Path) -> None:
    package = json.loads((release / "datapackage.json").read_text())
    best = next(r for r in package["resources"] if r["name"] == "best-configurations")
    field = next(f for f in best["schema"]["fields"] if f["name"] == "median_itl_ms")
    assert field["unit"] == "ms" and field["type"] == "number" and field["description"]
    assert package["licenses"][0]["name"] == "Apache-2.0"
    croissant = json.loads((release / "croissant.json").read_text())
    assert croissant["citeAs"].startswith("Chung et al.") and croissant["license"].endswith("LICENSE-2.0")
    for distribution in croissant["distribution"]:
        data = (release / distribution["contentUrl"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == distribution["sha256"]
    assert "cff-version: 1.2.0" in (release / "CITATION.cff").read_text()
    sums = (release / "SHA256SUMS").read_text().splitlines()
    files = sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    assert [line.split("  ", 1)[1] for line in sums] == files
    for line in sums:
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == digest


def test_a_rebuilt_release_is_byte_identical(release: Path, history_build: Paths, tmp_path: Path) -> None:
    # Rebuilt in a copy of the build: replacing the shared release would pull files from under the
    # tests reading it on the other worker.
    copy = tmp_path / "out"
    shutil.copytree(history_build.out, copy, symlinks=True, ignore=shutil.ignore_patterns("raw", "release", ".lock"))
    again = cli("release", "--out", copy)
    assert again.returncode == 0, again.stderr
    first = copy / "release" / release.name
    assert sorted(p.relative_to(first) for p in first.rglob("*")) == sorted(p.relative_to(release) for p in release.rglob("*"))
    for path in first.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (release / path.relative_to(first)).read_bytes(), path


def test_the_data_load_as_they_are(release: Path, history_build: Paths) -> None:
    table = pq.read_table(release / "data" / "best_configurations.parquet")
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        rows = connection.execute("select count(*) from best_configurations").fetchone()[0]
        from_csv = connection.execute(f"select count(*) from read_csv('{release / 'data' / 'best_configurations.csv'}')").fetchone()[0]
    assert table.num_rows == rows == from_csv
    assert (release / "index" / "lm-arena-chat" / "index.json").is_file()
    changes = (release / "CHANGES.md").read_text()
    assert changes.startswith("# Changes in 2026-02-16-7885788") and "since 2026-02-14-0578467" in changes


def test_the_ecologits_adapter_is_the_least_squares_fit_of_its_points(release: Path, history_build: Paths) -> None:
    import numpy

    adapter = json.loads((release / "adapters" / "ecologits.json").read_text())
    assert adapter["ecologits"]["version"] == "0.9.1" and adapter["ecologits"]["batch_size"] == 64
    fit = next(f for f in adapter["fits"] if (f["task"], f["gpu"], f["latency_metric"], f["latency_limit"])
               == ("lm-arena-chat", "H100", "median_itl_ms", 500.0))
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        points = connection.execute("""
            select m.activated_params_billions, min(c.joules_per_output_token) / 3600
            from configurations as c join models as m using (snapshot_id, model_id)
            where c.task = 'lm-arena-chat' and c.gpu = 'H100' and c.max_num_seqs = 64 and c.median_itl_ms <= 500
            group by c.model_id, m.activated_params_billions""").fetchall()
    slope, intercept = numpy.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    assert fit["models"] == len(points) >= 3
    assert fit["wh_per_token_per_billion_active"] == pytest.approx(slope, rel=1e-5)
    assert fit["wh_per_token_intercept"] == pytest.approx(intercept, rel=1e-5)
    assert fit["min_residual_wh_per_token"] < 0 < fit["max_residual_wh_per_token"]
    assert fit["concurrency"] == 64 and fit["ecologits_over_measured_min"] <= fit["ecologits_over_measured_max"]


def test_the_readme_loading_example_runs(release: Path) -> None:
    """docs/release.md's Python block, with its path pointed at a real release (Spark is shown only)."""
    pytest.importorskip("polars", reason="the interop extra is not installed (make test installs it)")
    import re

    readme = (Path(__file__).resolve().parents[1] / "docs" / "release.md").read_text(encoding="utf-8")
    block = re.search(r"^```python\n(import pandas as pd, polars as pl, duckdb\n.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert block, "docs/release.md has no release loading example"
    code = block.group(1).replace("build/release/2026-02-16-7885788", str(release))
    namespace: dict = {}
    exec(compile(code, "docs/release.md", "exec"), namespace)  # noqa: S102 (our own docs)
    assert namespace["pd"].read_parquet(release / "data" / "best_configurations.parquet").shape[0] > 0


def test_the_release_carries_the_boundaries_with_each_factors_source(release: Path) -> None:
    rows = pq.read_table(release / "data" / "boundary_factors.parquet").to_pylist()
    assert {row["boundary"] for row in rows} == {"server", "facility"}
    assert all(row["source"] and row["url"].startswith("https://") and row["year"] and row["quoted_figure"] for row in rows)
    package = json.loads((release / "datapackage.json").read_text())
    assert {row["url"] for row in rows} <= {source["path"] for source in package["sources"]}
    resource = next(r for r in package["resources"] if r["name"] == "index-boundaries")
    assert {row["url"] for row in rows} == {source["path"] for source in resource["sources"]}
    assert "not measurements" in resource["description"]
    croissant = json.loads((release / "croissant.json").read_text())
    record_set = next(r for r in croissant["recordSet"] if r["@id"] == "boundary_factors")
    assert all(row["url"] in record_set["description"] for row in rows)
    boundaries = pq.read_table(release / "data" / "index_boundaries.parquet")
    best = pq.read_table(release / "data" / "best_configurations.parquet")
    assert boundaries.num_rows == 3 * best.num_rows
    adapter = json.loads((release / "adapters" / "ecologits.json").read_text())
    assert adapter["boundary"].startswith("gpu_only") and "twice" in adapter["boundary"]


DOCS = PROJECT / "docs" / "release.md"


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


def test_a_release_has_the_same_bytes_whatever_else_the_database_holds(releases: tuple[Path, Path]) -> None:
    one, eleven = releases
    files = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(eleven).as_posix() for p in eleven.rglob("*") if p.is_file())
    differing = [name for name in files if (one / name).read_bytes() != (eleven / name).read_bytes()]
    # CHANGES.md lists the changes since the snapshot before, which a one-snapshot database lacks.
    assert differing == ["CHANGES.md", "SHA256SUMS"]

    def sums(release: Path) -> list[str]:
        return [line for line in (release / "SHA256SUMS").read_text().splitlines() if not line.endswith("  CHANGES.md")]

    assert sums(one) == sums(eleven) and len(sums(one)) == len(files) - 2


def test_the_ecologits_refit_gives_the_same_floats_run_after_run(history_build: Paths) -> None:
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        connection.execute("set threads = 4")
        results = {
            tuple(connection.execute("select * from ecologits_refit order by all").fetchall()) for _ in range(20)
        }
    assert len(results) == 1 and len(next(iter(results))) > 50


def test_release_files_are_named_after_the_views_they_hold(releases: tuple[Path, Path], newest_build: Paths) -> None:
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


def test_the_documented_typed_reads_give_every_release_csv_column_its_declared_type(releases: tuple[Path, Path]) -> None:
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


def test_the_release_citation_names_every_author_of_the_paper(releases: tuple[Path, Path]) -> None:
    import yaml

    one, _ = releases
    citation = yaml.safe_load((one / "CITATION.cff").read_text())
    authors = [(a["given-names"], a["family-names"]) for a in citation["preferred-citation"]["authors"]]
    assert authors == [("Jae-Won", "Chung"), ("Jeff J.", "Ma"), ("Ruofan", "Wu"), ("Jiachen", "Liu"),
                       ("Oh Jun", "Kweon"), ("Yuxuan", "Xia"), ("Zhiyu", "Wu"), ("Mosharaf", "Chowdhury")]
