"""Fetching a snapshot by URL from a server on 127.0.0.1, and the fetch's refusals."""

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import (
    CLI,
    NEWEST,
    SERVED_COMMIT,
    UPSTREAM,
    FaultyHandler,
    cli,
    copy_build,
    read_json,
    refresh_args,
    shared_folder,
    tree_digest,
    writable_copy,
)

from pipeline.paths import Paths

COMMIT = SERVED_COMMIT
SERVED = f"/{COMMIT}/public/data"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def fetched_by_url(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[str, Path]:
    """`energy-index refresh --source URL --out OUT` with the defaults, URL a server on 127.0.0.1 serving the
    newest snapshot at <SERVED_COMMIT>/public/data (as the server fixture does, without its faults), made
    once per test session: URL and OUT."""
    def refresh(folder: Path) -> None:
        www = folder / "www"
        (www / COMMIT / "public").mkdir(parents=True)
        os.symlink(NEWEST, www / COMMIT / "public" / "data")
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(www)))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{COMMIT}/public/data"
        try:
            fetched = cli(*refresh_args(url, folder / "out"))
        finally:
            httpd.shutdown()
            httpd.server_close()
        assert fetched.returncode == 0, fetched.stderr
        (folder / "url").write_text(url, encoding="utf-8")

    folder = shared_folder(tmp_path_factory, worker_id, "fetched-by-url", refresh)
    return (folder / "url").read_text(encoding="utf-8"), folder / "out"


def test_fetch_by_url_gets_the_same_files_as_a_local_fetch(fetched_by_url: tuple[str, Path],
                                                           plain_build: Paths) -> None:
    url, http_out = fetched_by_url  # refresh --source URL with the defaults
    local_out = plain_build.out  # refresh --source NEWEST with the defaults

    by_url = read_json(Paths(http_out).raw_snapshot("7885788") / "manifest.json")
    local = read_json(Paths(local_out).raw_snapshot("2026-02-16-7885788") / "manifest.json")
    assert by_url["source"] == url
    assert by_url["upstream"] == {"commit": COMMIT}
    local_files = {f["path"]: f for f in local["files"]}
    # Over HTTP the fetch takes the model files the task files imply; the local folder may hold more.
    assert by_url["files"] and all(local_files[f["path"]] == f for f in by_url["files"])
    assert {f["path"] for f in by_url["files"] if not f["path"].startswith("models/")} == {
        path for path in local_files if not path.startswith("models/")
    }
    for task in ("gpqa", "lm-arena-chat"):
        http_index = (http_out / "index" / task / "index.json").read_bytes()
        local_index = read_json(local_out / "index" / task / "index.json")
        assert json.loads(http_index)["rows"] == local_index["rows"]


def test_a_missing_model_file_is_named_and_the_previous_snapshot_kept(server, tmp_path: Path, run_cli,
                                                                      fetched_by_url: tuple[str, Path]) -> None:
    base, www = server
    url = f"{base}/{COMMIT}/public/data"
    out = copy_build(Paths(fetched_by_url[1]), tmp_path / "out")  # the snapshot fetched by URL and published
    manifest = (Paths(out).raw_snapshot("7885788") / "manifest.json").read_bytes()

    (www / COMMIT / "public" / "data").unlink()
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in ("index.json", "tasks"):
        os.symlink(NEWEST / part, copy / part)
    (copy / "models").mkdir()
    for model_file in (NEWEST / "models").iterdir():
        if model_file.name != "Qwen__Qwen3-8B__gpqa.json":
            os.symlink(model_file, copy / "models" / model_file.name)
    os.symlink(copy, www / COMMIT / "public" / "data")

    result = run_cli(*refresh_args(url, out))
    assert result.exit_code == 1
    assert f"{url}/models/Qwen__Qwen3-8B__gpqa.json: HTTP 404" in result.stderr
    assert (Paths(out).raw_snapshot("7885788") / "manifest.json").read_bytes() == manifest


def test_a_redirect_to_another_scheme_or_host_is_refused(server, tmp_path: Path, run_cli) -> None:
    base, _ = server
    url = f"{base}/{COMMIT}/public/data"
    FaultyHandler.redirects[f"/{COMMIT}/public/data/index.json"] = "file:///etc/passwd"
    result = run_cli(*refresh_args(url, tmp_path / "out"))
    assert result.exit_code == 1
    assert "refused redirect to file:///etc/passwd" in result.stderr

    FaultyHandler.redirects[f"/{COMMIT}/public/data/index.json"] = "http://example.invalid/index.json"
    result = run_cli(*refresh_args(url, tmp_path / "out"))
    assert "refused redirect to http://example.invalid/index.json" in result.stderr


def test_a_file_over_the_size_cap_is_refused(server, tmp_path: Path, run_cli) -> None:
    base, _ = server
    result = run_cli(*refresh_args(f"{base}/{COMMIT}/public/data", tmp_path / "out", "--max-file-bytes", "100000"))
    assert result.exit_code == 1
    assert "larger than the size cap of 100000 bytes" in result.stderr
    result = run_cli(*refresh_args(NEWEST, tmp_path / "out", "--max-file-bytes", "100000"))
    assert "larger than the size cap of 100000 bytes" in result.stderr


def test_a_link_out_of_a_local_source_is_refused(source_copy: Path, tmp_path: Path, run_cli) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    os.symlink(secret, source_copy / "models" / "leak__x__gpqa.json")
    result = run_cli(*refresh_args(source_copy, tmp_path / "out"))
    assert result.exit_code == 1
    assert "outside the source directory; refused" in result.stderr
    assert not (tmp_path / "out" / "raw" / "2026-02-16-7885788").exists()


def test_a_local_source_without_commit_facts_gets_a_content_id(undated_refresh: tuple[Path, Path, str]) -> None:
    _, out, _ = undated_refresh  # a refresh of a copy of the newest snapshot without snapshot.json
    (snapshot_dir,) = [p for p in (out / "raw").iterdir() if p.is_dir()]
    assert snapshot_dir.name.startswith("local-")
    source = read_json(out / "index" / "gpqa" / "index.json")["source"]
    assert source["compiled_evidence"] == "the leaderboard's public/data/index.json last_updated"


def test_a_server_that_stalls_is_given_up_on_after_the_timeout(server, tmp_path: Path, run_cli) -> None:
    base, _ = server
    FaultyHandler.stalled.add(f"/{COMMIT}/public/data/tasks/gpqa.json")
    started = time.monotonic()
    result = run_cli(*refresh_args(f"{base}/{COMMIT}/public/data", tmp_path / "out", "--timeout", "1"))
    assert result.exit_code == 1
    assert "tasks/gpqa.json: timed out" in result.stderr
    assert time.monotonic() - started < 10


def test_an_endless_body_stops_at_the_size_cap(server, tmp_path: Path, run_cli) -> None:
    base, _ = server
    FaultyHandler.endless.add(f"/{COMMIT}/public/data/index.json")
    result = run_cli(*refresh_args(f"{base}/{COMMIT}/public/data", tmp_path / "out", "--max-file-bytes", "1000000"))
    assert result.exit_code == 1
    assert "index.json: larger than the size cap of 1000000 bytes" in result.stderr


def test_commit_facts_that_would_make_a_path_are_refused(source_copy: Path, tmp_path: Path, run_cli) -> None:
    facts = json.loads((source_copy / "snapshot.json").read_text())
    facts["commit_time"] = "../../escape"
    (source_copy / "snapshot.json").write_text(json.dumps(facts))
    result = run_cli(*refresh_args(source_copy, tmp_path / "out"))
    assert result.exit_code == 1
    assert "commit_time '../../escape' is not an ISO 8601 time" in result.stderr
    assert not (tmp_path / "escape").exists()


def test_a_snapshot_json_commit_time_without_a_zone_is_refused_naming_it(source_copy: Path, tmp_path: Path,
                                                                         run_cli) -> None:
    facts = json.loads((source_copy / "snapshot.json").read_text())
    facts["commit_time"] = "2026-02-16T04:48:29"
    (source_copy / "snapshot.json").write_text(json.dumps(facts))
    result = run_cli(*refresh_args(source_copy, tmp_path / "out"))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1:] == [
        f"energy-index: error: {source_copy / 'snapshot.json'}: commit_time '2026-02-16T04:48:29' has no time zone; "
        "add Z (UTC) or the offset, e.g. 2026-02-16T09:48:29Z or 2026-02-16T04:48:29-05:00"]


def test_the_archive_is_a_copy_that_an_edit_of_the_source_does_not_reach(
    source_copy: Path, tmp_path: Path, run_cli
) -> None:
    out = tmp_path / "out"
    assert run_cli("fetch", "--source", source_copy, "--out", out).exit_code == 0
    task_file = source_copy / "tasks" / "gpqa.json"
    (archived,) = [p for p in (out / "raw").iterdir() if p.is_dir()]
    assert (archived / "tasks" / "gpqa.json").stat().st_ino != task_file.stat().st_ino
    before = (archived / "tasks" / "gpqa.json").read_bytes()

    # An edit made in place to the source (as cp -p, an editor or a sync tool would) stays there.
    with open(task_file, "r+b") as handle:
        handle.seek(-2, 2)
        handle.write(b" }")
    assert (archived / "tasks" / "gpqa.json").read_bytes() == before
    assert run_cli("ingest", "--out", out).exit_code == 0


def test_a_folder_without_snapshot_json_is_dated_with_a_warning_or_refused_in_a_history(
    tmp_path: Path, undated_refresh: tuple[Path, Path, str]
) -> None:
    undated, _, alone_stderr = undated_refresh  # its refresh alone succeeded there
    assert "has no commit time (no snapshot.json)" in alone_stderr
    assert "placed in the history by the day it was first fetched" in alone_stderr
    assert "--commit-time" in alone_stderr and "COMMIT_TIME=" in alone_stderr
    # Between two dated snapshots its place would be a guess: refused, naming it and what to do.
    oldest, newest = sorted(UPSTREAM.iterdir())[0], sorted(UPSTREAM.iterdir())[-1]
    mixed = cli("history", "--source", oldest, undated, newest, "--out", tmp_path / "mixed")
    assert mixed.returncode == 1
    assert "have no commit time (no snapshot.json)" in mixed.stderr and str(undated) in mixed.stderr
    # Given a commit time, it takes its place and the warning goes.
    dated = cli("refresh", "--source", undated, "--out", tmp_path / "dated", "--commit-time", "2025-12-20T12:00:00Z")
    assert dated.returncode == 0 and "has no commit time" not in dated.stderr


def test_an_edit_of_the_source_in_place_leaves_the_archive_as_fetched(tmp_path: Path) -> None:
    out, source = tmp_path / "out", writable_copy(NEWEST, tmp_path / "source")
    (source / "snapshot.json").unlink()
    assert cli("fetch", "--source", source, "--out", out).returncode == 0
    snapshot_id = (out / "raw" / "LATEST").read_text().strip()
    archived = tree_digest(out, f"raw/{snapshot_id}")
    # cp -p over the source file: same inode, content changed in place.
    edited = tmp_path / "edited.json"
    edited.write_text((source / "index.json").read_text().replace("\n", "\n ", 1))
    subprocess.run(["cp", "-p", str(edited), str(source / "index.json")], check=True)
    assert tree_digest(out, f"raw/{snapshot_id}") == archived
    assert cli("ingest", "--out", out, "--snapshot", snapshot_id).returncode == 0


def test_a_trickling_server_cannot_extend_the_deadline(server, tmp_path: Path) -> None:
    base, _ = server
    url = f"{base}{SERVED}"
    FaultyHandler.trickling.add(f"{SERVED}/index.json")
    started = time.monotonic()
    result = cli("refresh", "--source", url, "--out", tmp_path / "out", "--timeout", "1.5")
    assert result.returncode == 1
    assert "index.json: timed out: not received within 1.5 s" in result.stderr
    assert time.monotonic() - started < 6


def test_a_whole_fetch_deadline_holds_too(server, tmp_path: Path) -> None:
    base, _ = server
    url = f"{base}{SERVED}"
    FaultyHandler.trickling.add(f"{SERVED}/index.json")
    result = cli("refresh", "--source", url, "--out", tmp_path / "out", "--fetch-deadline", "1")
    assert result.returncode == 1
    assert "the fetch did not finish within its 1 s deadline" in result.stderr


def test_an_endless_body_is_streamed_to_disk_not_held_in_memory(server, tmp_path: Path) -> None:
    base, _ = server
    url = f"{base}{SERVED}"
    FaultyHandler.endless.add(f"{SERVED}/index.json")
    cap = 200 * 1024 * 1024
    # The refresh's peak measured by a small process that starts it: a child forked from this worker
    # would count the worker's own memory in its peak (Linux keeps the peak across exec).
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "sys.stderr.write(r.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)")
    measured = subprocess.run([sys.executable, "-c", measure, CLI, "refresh", "--source", url, "--out",
                               str(tmp_path / "out"), "--max-file-bytes", str(cap)],
                              capture_output=True, text=True, timeout=300)
    peak_kib, returncode = map(int, measured.stdout.split())
    assert returncode == 1
    assert f"index.json: larger than the size cap of {cap} bytes" in measured.stderr
    # The child's peak stays far below the 200 MiB it received (it would be above it if held).
    assert peak_kib < 120 * 1024, peak_kib
    assert not list((tmp_path / "out" / "raw").glob(".staging-*"))


def test_a_declared_length_over_the_cap_is_refused_before_reading(server, tmp_path: Path) -> None:
    base, _ = server
    url = f"{base}{SERVED}"
    FaultyHandler.huge_length.add(f"{SERVED}/index.json")
    started = time.monotonic()
    result = cli("refresh", "--source", url, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert "(Content-Length 1000000000000)" in result.stderr
    assert time.monotonic() - started < 4
