"""A refresh run from cron never exits 0 unless the published index is the checked result of the
current input (issue 9). Each test drives real processes: `make`, the CLI, a server on 127.0.0.1."""

import http.server
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from conftest import BUILD_OUTPUTS, NEWEST, PROJECT, SNAPSHOTS, busy_loops, tree_digest

OLDER = next(path for path in SNAPSHOTS if path.name == "2026-02-13-82e15a4")
CLI = str(Path(sys.executable).with_name("energy-index"))


def make(out: Path, source: Path | str, *extra: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-C", str(PROJECT), f"SOURCE={source}", f"OUT={out}", *extra],
        capture_output=True, text=True, timeout=300,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def cli(*args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300, **kwargs)


def published_snapshot(out: Path) -> str:
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        return connection.execute("select snapshot_id from index_snapshot").fetchone()[0]


def writable_copy(snapshot: Path, target: Path) -> Path:
    shutil.copytree(snapshot, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def add_configuration_on_a_new_gpu(source: Path) -> None:
    path = source / "tasks" / "gpqa.json"
    document = json.loads(path.read_text())
    row = dict(document["configurations"][0], gpu_model="H200")
    document["configurations"].append(row)
    path.write_text(json.dumps(document, indent=2))


def test_1_a_failed_refresh_fails_again_on_retry_and_a_fetched_one_is_published(tmp_path: Path) -> None:
    out, source = tmp_path / "out", writable_copy(NEWEST, tmp_path / "source")
    assert make(out, source).returncode == 0
    published = tree_digest(out, *BUILD_OUTPUTS)

    # A broken task file behind the published snapshot's snapshot.json: refused, and again on retry.
    (source / "tasks" / "gpqa.json").write_text("{broken")
    for _ in range(2):
        result = make(out, source)
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
    retry = make(out, source)
    assert retry.returncode == 0, retry.stderr
    assert "nothing to do" not in retry.stderr
    assert published_snapshot(out).startswith("local-")
    again = make(out, source)
    assert again.returncode == 0 and "nothing to do" in again.stderr


def test_2_changed_content_is_never_published_under_the_upstream_commit(tmp_path: Path) -> None:
    out, source = tmp_path / "out", writable_copy(NEWEST, tmp_path / "source")
    assert make(out, source).returncode == 0
    raw = tree_digest(out, "raw/2026-02-16-7885788")
    parquet = tree_digest(out, "parquet")
    add_configuration_on_a_new_gpu(source)
    result = make(out, source)
    assert result.returncode != 0
    assert "these files differ from snapshot 2026-02-16-7885788 as it was published: tasks/gpqa.json" in result.stderr
    assert "remove or edit snapshot.json" in result.stderr
    assert tree_digest(out, "raw/2026-02-16-7885788") == raw
    assert tree_digest(out, "parquet") == parquet


def test_3_cp_a_of_a_newer_snapshot_over_the_source_is_seen(tmp_path: Path) -> None:
    out, source = tmp_path / "out", writable_copy(OLDER, tmp_path / "source")
    assert make(out, source).returncode == 0
    assert published_snapshot(out) == OLDER.name
    # cp -a keeps the newer snapshot's (old) modification times; only ctime and content change.
    for stale in source.rglob("*.json"):
        stale.unlink()
    subprocess.run(["cp", "-a", f"{NEWEST}/.", str(source)], check=True)
    result = make(out, source)
    assert result.returncode == 0, result.stderr
    assert published_snapshot(out) == NEWEST.name


def test_4_an_edit_of_the_source_in_place_leaves_the_archive_as_fetched(tmp_path: Path) -> None:
    out, source = tmp_path / "out", writable_copy(NEWEST, tmp_path / "source")
    (source / "snapshot.json").unlink()
    assert make(out, source).returncode == 0
    snapshot_id = published_snapshot(out)
    archived = tree_digest(out, f"raw/{snapshot_id}")
    # cp -p over the source file: same inode, content changed in place.
    edited = tmp_path / "edited.json"
    edited.write_text((source / "index.json").read_text().replace("\n", "\n ", 1))
    subprocess.run(["cp", "-p", str(edited), str(source / "index.json")], check=True)
    assert tree_digest(out, f"raw/{snapshot_id}") == archived
    assert cli("ingest", "--out", out, "--snapshot", snapshot_id).returncode == 0


def test_5_concurrent_makes_never_leave_a_stale_publish_behind_a_success(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = [
        subprocess.Popen(["make", "-s", "-C", str(PROJECT), f"SOURCE={source}", f"OUT={out}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for source in (OLDER, NEWEST, OLDER)
    ]
    outcomes = [(run.wait(timeout=300), run.communicate()[1]) for run in runs]
    for code, stderr in outcomes:
        assert code == 0 or "another energy-index command is writing here" in stderr, stderr
    # Whatever won the race, a run for NEWEST now either publishes it or has nothing to do because it is.
    final = make(out, NEWEST)
    assert final.returncode == 0
    assert published_snapshot(out) == NEWEST.name
    assert not {".parameters", ".refreshed", ".refreshed.started"} & {p.name for p in out.iterdir()}


@pytest.mark.parametrize("name", ["it's here $HOME b;c", "q'; touch pwned; echo '$(touch pwned)`touch pwned`"])
def test_6_make_passes_any_path_as_a_value_and_runs_none_of_it(tmp_path: Path, name: str) -> None:
    source = writable_copy(NEWEST, tmp_path / name)
    out = tmp_path / f"out {name}"
    result = make(out, source)
    assert result.returncode == 0, result.stderr
    assert (out / "index" / "gpqa" / "index.json").is_file()
    assert not list(PROJECT.glob("pwned")) and not list(tmp_path.glob("pwned"))


class _Trickle(http.server.BaseHTTPRequestHandler):
    mode = "trickle"
    released = threading.Event()  # set when the test ends: the server stops sending

    def do_GET(self) -> None:  # noqa: N802
        if self.mode == "huge-length":
            self.send_response(200)
            self.send_header("Content-Length", str(10**12))
            self.end_headers()
            self.released.wait()  # the body never comes
            return
        self.send_response(200)
        self.end_headers()
        if self.mode == "trickle":
            # One byte every 0.2 s, until the test ends (or 12 s at most).
            for _ in range(60):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                if self.released.wait(0.2):
                    return
        else:  # endless: 256 MiB at most, past the client's cap
            for _ in range(4096):
                try:
                    self.wfile.write(b"[" * 65536)
                except OSError:
                    return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickle_server() -> Iterator[str]:
    _Trickle.released = threading.Event()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/data"
    finally:
        _Trickle.released.set()
        httpd.shutdown()
        httpd.server_close()


def test_7_a_trickling_server_cannot_extend_the_deadline(trickle_server: str, tmp_path: Path) -> None:
    _Trickle.mode = "trickle"
    started = time.monotonic()
    result = cli("refresh", "--source", trickle_server, "--out", tmp_path / "out", "--timeout", "1.5")
    assert result.returncode == 1
    assert "index.json: timed out: not received within 1.5 s" in result.stderr
    assert time.monotonic() - started < 6


def test_7_a_whole_fetch_deadline_holds_too(trickle_server: str, tmp_path: Path) -> None:
    _Trickle.mode = "trickle"
    result = cli("refresh", "--source", trickle_server, "--out", tmp_path / "out", "--fetch-deadline", "1")
    assert result.returncode == 1
    assert "the fetch did not finish within its 1 s deadline" in result.stderr


def test_7_an_endless_body_is_streamed_to_disk_not_held_in_memory(trickle_server: str, tmp_path: Path) -> None:
    _Trickle.mode = "endless"
    cap = 200 * 1024 * 1024
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = cli("refresh", "--source", trickle_server, "--out", tmp_path / "out", "--max-file-bytes", str(cap))
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert result.returncode == 1
    assert f"index.json: larger than the size cap of {cap} bytes" in result.stderr
    # The child's peak stays far below the 200 MiB it received (it would be above it if held).
    assert peak_kib < 120 * 1024 or peak_kib == before, peak_kib
    assert not list((tmp_path / "out" / "raw").glob(".staging-*"))


def test_7_a_declared_length_over_the_cap_is_refused_before_reading(trickle_server: str, tmp_path: Path) -> None:
    _Trickle.mode = "huge-length"
    started = time.monotonic()
    result = cli("refresh", "--source", trickle_server, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert "(Content-Length 1000000000000)" in result.stderr
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("load", ["idle", "loaded"])
def test_ctrl_c_is_one_line_exit_1_and_the_publish_intact(trickle_server: str, tmp_path: Path, load: str) -> None:
    out = tmp_path / "out"
    assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    published = tree_digest(out, *BUILD_OUTPUTS)
    _Trickle.mode = "trickle"
    with busy_loops(load):
        process = subprocess.Popen([CLI, "refresh", "--source", trickle_server, "--out", str(out)],
                                   stderr=subprocess.PIPE, text=True)
        # Ready when the fetch says it is reading the (trickling) source: the refresh is under way.
        first = process.stderr.readline()
        assert first.startswith("fetch: reading "), first
        process.send_signal(signal.SIGINT)
        stderr = first + process.communicate(timeout=60)[1]
    assert process.returncode == 1
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"energy-index: error: interrupted; the last published build in {out} is unchanged"
    )
    assert tree_digest(out, *BUILD_OUTPUTS) == published


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_8_a_full_disk_is_one_clear_line_and_the_publish_survives(small_disk: Path) -> None:
    out = small_disk / "out"
    assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    published = tree_digest(out, *BUILD_OUTPUTS)
    filler = small_disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "count=40"], capture_output=True)
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


def test_8_a_read_only_file_system_is_one_clear_line(small_disk: Path) -> None:
    out = small_disk / "out"
    assert cli("refresh", "--source", NEWEST, "--out", out).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = cli("refresh", "--source", NEWEST, "--out", out, "--itl-deadline-ms", "250")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "read-only file system; choose an --out on a writable file system" in result.stderr


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_9_published_files_honour_the_umask(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "out"
    assert make(out, NEWEST, umask=umask).returncode == 0
    expected = 0o666 & ~umask
    published = [
        out / "current" / "refresh.json", out / "raw" / "LATEST", out / "current" / "energy_index.duckdb",
        *(out / "current" / "parquet").rglob("*.parquet"), *(out / "current" / "index").rglob("*.json"),
        *(out / "raw").rglob("manifest.json"), *(out / "raw").rglob("tasks/*.json"),
    ]
    modes = {str(path.relative_to(out)): oct(path.stat().st_mode & 0o777) for path in published}
    assert set(modes.values()) == {oct(expected)}, modes


def test_9_exit_statuses_as_the_readme_states(tmp_path: Path) -> None:
    not_a_snapshot = tmp_path / "empty"
    not_a_snapshot.mkdir()
    assert cli("refresh", "--source", not_a_snapshot, "--out", tmp_path / "out").returncode == 1
    assert cli("refresh", "--no-such-option").returncode == 2
    missing = tmp_path / "missing"
    assert cli("refresh", "--source", missing, "--out", tmp_path / "out").returncode == 2  # a usage error
    through_make = make(tmp_path / "out", not_a_snapshot)
    assert through_make.returncode == 2  # GNU make's own status for any failed recipe
    assert f"{not_a_snapshot}: not a snapshot folder (no index.json)" in through_make.stderr
