"""Operating guarantees: readers are never blocked or shown a mix, refreshes never interleave, and a
refresh killed at any point leaves the last good build intact, a full or read-only disk is one clear line,
and published files honour the umask."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    BUILD_OUTPUTS,
    CLI,
    NEWEST,
    SNAPSHOTS,
    cli,
    cli_process,
    copy_build,
    published_snapshot,
    refresh_args,
    tree_digest,
)

from pipeline.cli import main
from pipeline.paths import Paths

OLDER = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")

READER = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
for line in sys.stdin:
    row = connection.execute(
        "select (select snapshot_id from index_snapshot), count(*) from configurations"
    ).fetchone()
    print(row[0], row[1], flush=True)
"""


def test_a_reader_holding_the_database_keeps_its_view_and_does_not_block(tmp_path: Path, snapshot_refresh) -> None:
    out = copy_build(snapshot_refresh(OLDER), tmp_path / "out")
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


def test_a_second_writer_is_refused_while_the_lock_is_held(tmp_path: Path, run_cli, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
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
                     id="after-switch", marks=pytest.mark.sweep),  # switched, older generations not yet removed
    ],
)
def test_killing_a_refresh_leaves_the_last_good_build(
    tmp_path: Path, target: str, attribute: str, when: str, nth: int, published: bool, plain_build: Paths,
    snapshot_refresh,
) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    digest = tree_digest(out, *BUILD_OUTPUTS)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, target, attribute, when, str(nth), *refresh_args(OLDER, out, "--as-index")],
        capture_output=True, text=True, timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if published:
        # The switch is one rename: all of the new build, the same as a refresh of OLDER from scratch.
        assert published_snapshot(out) == OLDER.name
        assert tree_digest(snapshot_refresh(OLDER).out, "index") == tree_digest(out, "index")
    else:
        assert tree_digest(out, *BUILD_OUTPUTS) == digest
        assert published_snapshot(out) == NEWEST.name
    assert main(refresh_args(OLDER, out, "--as-index")) == 0
    assert published_snapshot(out) == OLDER.name
    assert [p.name for p in Paths(out).generations_dir.iterdir() if not p.name.isdigit()] == []


# Room for a published build (about 35 MB) and a second generation beside it, which a refresh writes
# before it publishes; the filler takes all of it.
SMALL_DISK_MB = 96


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_MB}m", "tmpfs", str(mount)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_clear_line_and_the_publish_survives(small_disk: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, small_disk / "out")
    published = tree_digest(out, *BUILD_OUTPUTS)
    filler = small_disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", f"count={SMALL_DISK_MB}"], capture_output=True)
    result = cli("refresh", "--source", NEWEST, "--out", out, "--itl-deadline-ms", "250")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("energy-index: error:")]
    assert len(error_lines) == 1
    assert "no space left on the device; free some space and run again" in error_lines[0]
    assert f"the last published build in {out} is unchanged" in error_lines[0]
    filler.unlink()
    assert tree_digest(out, *BUILD_OUTPUTS) == published
    assert cli("refresh", "--source", NEWEST, "--out", out, "--itl-deadline-ms", "250").returncode == 0


def test_a_read_only_file_system_is_one_clear_line(small_disk: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, small_disk / "out")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = cli("refresh", "--source", NEWEST, "--out", out, "--itl-deadline-ms", "250")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "read-only file system; choose an --out on a writable file system" in result.stderr


@pytest.mark.parametrize("umask", [0o022, pytest.param(0o002, marks=pytest.mark.sweep)])
def test_published_files_honour_the_umask(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "out"
    previous = os.umask(umask)  # as cron's or a login shell's would be
    try:
        assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    finally:
        os.umask(previous)
    expected = 0o666 & ~umask
    published = [
        out / "current" / "refresh.json", out / "raw" / "LATEST", out / "current" / "energy_index.duckdb",
        *(out / "current" / "parquet").rglob("*.parquet"), *(out / "current" / "index").rglob("*.json"),
        *(out / "raw").rglob("manifest.json"), *(out / "raw").rglob("tasks/*.json"),
    ]
    modes = {str(path.relative_to(out)): oct(path.stat().st_mode & 0o777) for path in published}
    assert set(modes.values()) == {oct(expected)}, modes


# Runs the CLI with pipeline.files' renames of TARGET watched: SIGKILL right before or right after the
# first one that moves it (the old folder renamed away, the new one moved in, or the two swapped). With
# "no-exchange", pipeline.files finds no swap in one step, as on a file system without renameat2's.
SWAP_KILLER = """
import os, signal, sys
from pathlib import Path
import pipeline.files as files
target, when, exchange = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def watched(rename):
    def run(first, second, *rest):
        moves = target in (Path(first), Path(second))
        if moves and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = rename(first, second, *rest)
        if moves:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return run
class WatchedOs:
    replace, rename = staticmethod(watched(os.replace)), staticmethod(watched(os.rename))
    def __getattr__(self, name):
        return getattr(os, name)
files.os = WatchedOs()
if hasattr(files, "exchange"):
    files.exchange = watched(files.exchange) if exchange == "exchange" else (lambda first, second: False)
from pipeline.cli import main
sys.exit(main(sys.argv[4:]))
"""


def _kill_at_the_swap(target: Path, when: str, exchange: str, *command: str | Path) -> None:
    killed = subprocess.run([sys.executable, "-c", SWAP_KILLER, str(target), when, exchange, *map(str, command)],
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr


def _old_folder(target: Path) -> None:
    """What a previous run published at `target`, told apart from the new one by a file of its own."""
    target.mkdir(parents=True)
    (target / "OLD").write_text("the previous run's\n")


@pytest.mark.parametrize(("when", "exchange", "left"), [
    pytest.param("before", "exchange", "old", id="staged", marks=pytest.mark.sweep),
    pytest.param("after", "exchange", "new", id="swapped"),  # swapped in one step: the old folder is at the staged name
    pytest.param("before", "no-exchange", "old", id="staged-two-renames", marks=pytest.mark.sweep),
    # Two renames: killed between them, neither is in place until the next run puts the old one back.
    pytest.param("after", "no-exchange", None, id="between-two-renames"),
])
def test_killing_a_release_at_its_swap_leaves_the_old_or_the_new_folder_and_the_next_run_clears_up(
        tmp_path: Path, plain_build: Paths, when: str, exchange: str, left: str | None) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    releases = out / "release"
    assert cli("release", "--out", out).returncode == 0
    (folder,) = releases.iterdir()
    new = tree_digest(releases, folder.name)
    shutil.rmtree(folder)
    _old_folder(folder)
    _kill_at_the_swap(folder, when, exchange, "release", "--out", out)
    if left == "old":
        assert [p.name for p in folder.iterdir()] == ["OLD"]
    elif left == "new":
        assert tree_digest(releases, folder.name) == new
    else:
        assert not folder.exists()
        assert any(p.name.startswith(f".{folder.name}.retired-") for p in releases.iterdir())
    assert [p.name for p in releases.iterdir() if p.name != folder.name]  # a leftover beside it
    again = cli("release", "--out", out)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in releases.iterdir()] == [folder.name]
    assert tree_digest(releases, folder.name) == new


@pytest.mark.slow  # two reports, about 40 s on two cores
def test_killing_a_report_as_it_swaps_leaves_the_new_folder_and_the_next_run_clears_up(
        tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    _old_folder(report := out / "report")
    beside = {p.name for p in out.iterdir()}
    _kill_at_the_swap(report, "after", "exchange", "report", "--out", out)
    assert (report / "index.html").is_file() and not (report / "OLD").exists()
    assert {p.name for p in out.iterdir()} != beside  # the old folder, left at the staged name
    again = cli("report", "--out", out)
    assert again.returncode == 0, again.stderr
    assert {p.name for p in out.iterdir()} == beside
    assert (report / "index.html").is_file()


def _dead_pid() -> int:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    return int(ended.stdout)


def test_only_stopped_processes_leftovers_are_swept_and_a_missing_folder_is_put_back(tmp_path: Path) -> None:
    from pipeline.files import sweep_leftovers

    dead, alive = _dead_pid(), os.getppid()  # pytest's parent: alive while the test runs
    for name in (f".a.staging-{dead}", f".a.retired-{dead}", ".a.staging", f".b.staging-{alive}",
                 f".b.retired-{alive}", f".c.retired-{dead}", "a", "b", ".kept"):
        (tmp_path / name).mkdir()
        (tmp_path / name / name).touch()
    sweep_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".b.retired-{alive}", f".b.staging-{alive}", ".kept", "a", "b", "c"]
    assert [p.name for p in (tmp_path / "c").iterdir()] == [f".c.retired-{dead}"]  # the old folder, put back


def test_without_a_swap_in_one_step_the_folder_is_still_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline import files

    for exchange in (True, False):
        if not exchange:
            monkeypatch.setattr(files, "exchange", lambda first, second: False)
        _old_folder(target := tmp_path / "target")
        with files.staged_directory(target) as staging:
            (staging / "NEW").touch()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
        assert [p.name for p in target.iterdir()] == ["NEW"]
        shutil.rmtree(target)


def test_a_fetch_and_a_refresh_remove_what_stopped_runs_left_outside_the_generations(
        tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    raw = Paths(out).raw_dir
    snapshot = raw / NEWEST.name
    left = raw / f".{snapshot.name}.retired-{_dead_pid()}"  # a stopped fetch's old copy
    shutil.copytree(snapshot, left)
    temporary = tmp_path / "tmp"
    spill = temporary / "energy-index-sql-stopped"  # a query killed with its command: no process holds it
    spill.mkdir(parents=True)
    (spill / "duckdb_temp_storage-0.tmp").write_bytes(b"\0" * 1024)
    refreshed = cli_process("refresh", "--source", NEWEST, "--out", out, env={**os.environ, "TMPDIR": str(temporary)})
    assert refreshed.returncode == 0 and "nothing to do" in refreshed.stderr, refreshed.stderr
    assert not left.exists() and snapshot.is_dir()
    assert list(temporary.iterdir()) == []


# Reads a folder's file in a loop until told to stop, then prints how many reads it made and how many found
# no file: a reader of OUT/report or a release on another core.
FOLDER_READER = """
import os, sys
marker, stop = os.path.join(sys.argv[1], "marker"), sys.argv[2]
reads = misses = 0
print("ready", flush=True)
while not os.path.exists(stop):
    reads += 1
    misses += not os.path.isfile(marker)
print(reads, misses, flush=True)
"""


def test_a_reader_finds_the_old_or_the_new_folder_while_it_is_replaced(tmp_path: Path) -> None:
    from pipeline.files import staged_directory

    (target := tmp_path / "report").mkdir()
    (target / "marker").touch()
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", FOLDER_READER, str(target), str(stop)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline() == "ready\n"
        for _ in range(500):
            with staged_directory(target) as staging:
                (staging / "marker").touch()
        stop.touch()
        reads, misses = map(int, reader.stdout.readline().split())
    finally:
        reader.kill()
        reader.wait()
    assert reads > 500 and misses == 0, (reads, misses)
