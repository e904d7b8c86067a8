"""Operating guarantees: readers are never blocked or shown a mix, refreshes never interleave, and a
refresh killed at any point leaves the last good build intact."""

import fcntl
import json
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import BUILD_OUTPUTS, NEWEST, SNAPSHOTS, refresh_args, tree_digest

from pipeline.cli import main
from pipeline.paths import Paths

OLDER = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
CLI = str(Path(sys.executable).with_name("energy-index"))

READER = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
for line in sys.stdin:
    row = connection.execute(
        "select (select snapshot_id from index_snapshot), count(*) from configurations"
    ).fetchone()
    print(row[0], row[1], flush=True)
"""


def published_snapshot(out: Path) -> str:
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        return connection.execute("select snapshot_id from index_snapshot").fetchone()[0]


def test_a_reader_holding_the_database_keeps_its_view_and_does_not_block(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(refresh_args(OLDER, out)) == 0
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(out / "energy_index.duckdb")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        reader.stdin.write("?\n")
        reader.stdin.flush()
        before = reader.stdout.readline().split()
        assert main(refresh_args(NEWEST, out)) == 0
        reader.stdin.write("?\n")
        reader.stdin.flush()
        during = reader.stdout.readline().split()
    finally:
        reader.stdin.close()
        reader.wait(timeout=30)
    assert before == during == [OLDER.name, "838"]
    assert published_snapshot(out) == NEWEST.name
    assert list(out.rglob("*.wal")) == []


def test_a_second_writer_is_refused_while_the_lock_is_held(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "out"
    assert run_cli(*refresh_args(NEWEST, out)).exit_code == 0
    digest = tree_digest(out, *BUILD_OUTPUTS)
    with open(Paths(out).lock_file, "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run_cli(*refresh_args(OLDER, out))
    assert result.exit_code == 1
    assert "another energy-index command is writing here" in result.stderr
    assert tree_digest(out, *BUILD_OUTPUTS) == digest


def test_two_refreshes_started_together_do_not_interleave(tmp_path: Path) -> None:
    out = tmp_path / "out"
    processes = [
        subprocess.Popen([CLI, *refresh_args(source, out)], stderr=subprocess.PIPE, text=True)
        for source in (OLDER, NEWEST)
    ]
    results = [(process.wait(timeout=120), process.stderr.read()) for process in processes]
    for code, stderr in results:
        assert code == 0 or (code == 1 and "another energy-index command is writing here" in stderr), stderr
    winners = [source.name for source, (code, _) in zip((OLDER, NEWEST), results) if code == 0]
    assert winners and published_snapshot(out) in winners
    index = json.loads((out / "index" / "gpqa" / "index.json").read_text())
    model_file = json.loads((out / "index" / "gpqa" / "models" / "qwen3-8b.json").read_text())
    assert index["source"]["compiled"] == model_file["source"]["compiled"]


# Runs the CLI with one function replaced by one that SIGKILLs the process on its nth call, before
# or after doing its work: the kill lands at a known point, so each point has one right outcome.
KILLER = """
import functools, importlib, os, signal, sys
target, attribute, when, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
module, _, cls = target.partition(":")
owner = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
original, calls = getattr(owner, attribute), []
@functools.wraps(original)
def killing(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(*args, **kwargs)
    if len(calls) == nth:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
setattr(owner, attribute, killing)
from pipeline.cli import main
sys.exit(main(sys.argv[5:]))
"""


@pytest.mark.parametrize(
    ("target", "attribute", "when", "nth", "published"),
    [
        # The two points around the switch run by default; the earlier steps' with the slow tests (make test-all).
        pytest.param("pipeline.archive", "replace_directory", "before", 1, False, marks=pytest.mark.slow,
                     id="fetch-staged"),  # the snapshot's files staged
        pytest.param("pipeline.archive", "replace_directory", "after", 1, False, marks=pytest.mark.slow,
                     id="fetched"),  # fetched, nothing ingested
        pytest.param("pipeline.ingest:_TableWriters", "write", "after", 2, False, marks=pytest.mark.slow,
                     id="ingest"),  # Parquet files half written
        pytest.param("pipeline.build", "create_views", "before", 1, False, marks=pytest.mark.slow,
                     id="build"),  # tables loaded, no views
        pytest.param("pipeline.jsontext", "dumps", "after", 20, False, marks=pytest.mark.slow,
                     id="export"),  # some index files written
        pytest.param("pipeline.publish", "_fsync_directory", "after", 1, False,
                     id="before-switch"),  # generation renamed, not switched
        pytest.param("pipeline.publish", "_fsync_directory", "after", 2, True,
                     id="after-switch"),  # switched, older generations not yet removed
    ],
)
def test_killing_a_refresh_leaves_the_last_good_build(
    tmp_path: Path, target: str, attribute: str, when: str, nth: int, published: bool
) -> None:
    out = tmp_path / "out"
    assert main(refresh_args(NEWEST, out)) == 0
    digest = tree_digest(out, *BUILD_OUTPUTS)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, target, attribute, when, str(nth), *refresh_args(OLDER, out, "--as-index")],
        capture_output=True, text=True, timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if published:
        # The switch is one rename: all of the new build, the same as a refresh of OLDER from scratch.
        assert published_snapshot(out) == OLDER.name
        assert main(refresh_args(OLDER, tmp_path / "clean")) == 0
        assert tree_digest(tmp_path / "clean", "index") == tree_digest(out, "index")
    else:
        assert tree_digest(out, *BUILD_OUTPUTS) == digest
        assert published_snapshot(out) == NEWEST.name
    assert main(refresh_args(OLDER, out, "--as-index")) == 0
    assert published_snapshot(out) == OLDER.name
    assert [p.name for p in Paths(out).generations_dir.iterdir() if not p.name.isdigit()] == []
