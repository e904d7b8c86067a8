"""`make` follows the upstream: the newest commit that changed public/data, asked of GitHub's API (here
a stand-in on 127.0.0.1 serving the shared snapshots as commits); one conditional request when nothing
changed; a pinned commit; the whole history, resumable; one snapshot id per commit however it arrives."""

import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import COMMITS, PROJECT, SEED, SEED_AS_OF, SEED_RETRIEVED, SNAPSHOTS, read_json, snapshot_id, tree_digest
from github_server import FakeGitHub

from pipeline.settings import GITHUB_API, GITHUB_RAW
from pipeline.paths import Paths
from schemas import TABLE_NAMES

CLI = str(Path(sys.executable).with_name("energy-index"))




def make(out: Path, *variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-C", str(PROJECT), f"OUT={out}", f"AS_OF={SEED_AS_OF}", f"RETRIEVED={SEED_RETRIEVED}",
         *variables], capture_output=True, text=True, timeout=300, env={**os.environ, "MAKEFLAGS": ""},
    )


def mtimes(out: Path) -> dict[Path, int]:
    return {path: path.lstat().st_mtime_ns for path in out.rglob("*") if path.name != ".lock"}


def snapshot_ids(out: Path) -> list[str]:
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        return [row[0] for row in connection.execute("select snapshot_id from snapshot_history order by position").fetchall()]


def folder_facts(short_sha: str) -> dict[str, str]:
    """A shared snapshot's snapshot.json, without the path it names."""
    facts = read_json(COMMITS[short_sha].folder / "snapshot.json")
    facts.pop("path")
    return facts


def test_a_refresh_follows_the_upstream_asks_once_when_unchanged_and_takes_a_new_commit(
    github: FakeGitHub, tmp_path: Path, run_cli
) -> None:
    github.commits = [COMMITS["f76e8d3"], COMMITS["82e15a4"], COMMITS["0578467"]]
    out = tmp_path / "out"
    first = run_cli("refresh", "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert first.exit_code == 0, first.stderr
    # The newest commit: its UTC date is a day after its committer's (2026-02-13T19:02:00-05:00).
    assert (out / "current" / "refresh.json").is_file() and snapshot_ids(out) == ["2026-02-14-0578467"]
    manifest = read_json(Paths(out).raw_snapshot("2026-02-14-0578467") / "manifest.json")
    assert manifest["upstream"] == {**folder_facts("0578467"), "commit_time": "2026-02-14T00:02:00Z"}
    assert manifest["source"] == f"{github.raw}/ml-energy/leaderboard/{COMMITS['0578467'].sha}/public/data"
    listing = "/api/repos/ml-energy/leaderboard/commits?path=public%2Fdata&per_page=1"
    assert [r["path"] for r in github.api_requests()][0] == listing
    assert github.api_requests()[0]["if_none_match"] is None
    assert len(github.raw_requests()) == len(manifest["files"])

    # Nothing new upstream: one conditional request, answered 304, and not a file of OUT touched.
    github.requests.clear()
    before, digest = mtimes(out), tree_digest(out, ".")
    second = run_cli("refresh", "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert second.exit_code == 0, second.stderr
    assert "nothing to do" in second.stderr
    assert [(r["path"], r["if_none_match"] is not None) for r in github.requests] == [(listing, True)]
    assert mtimes(out) == before and tree_digest(out, ".") == digest

    # A new commit upstream: fetched, ingested and published by the next refresh; its index is the seed's.
    github.commits.append(COMMITS["7885788"])
    github.requests.clear()
    third = run_cli("refresh", "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert third.exit_code == 0, third.stderr
    assert "refresh: published 2026-02-16-7885788" in third.stderr
    assert snapshot_ids(out) == ["2026-02-14-0578467", "2026-02-16-7885788"]
    exported = out / "index" / "lm-arena-chat" / "models" / SEED.name
    assert exported.read_bytes() == SEED.read_bytes()
    assert {r["path"].split("/")[4] for r in github.raw_requests()} == {COMMITS["7885788"].sha}


def test_a_pinned_commit_uses_the_token_and_once_held_needs_no_network(
    github: FakeGitHub, tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    github.commits = [COMMITS["82e15a4"], COMMITS["0578467"], COMMITS["7885788"]]
    monkeypatch.setenv("GITHUB_TOKEN", "test-token")
    out = tmp_path / "out"
    pinned = run_cli("fetch", "--commit", "82e15a4", "--out", out)
    assert pinned.exit_code == 0, pinned.stderr
    manifest = read_json(Paths(out).raw_snapshot("2026-02-13-82e15a4") / "manifest.json")
    assert manifest["upstream"] == {**folder_facts("82e15a4"), "commit_time": "2026-02-13T22:45:54Z"}
    # Every file of the folder, as a local copy has them, each checked against the tree's git hash.
    local = read_json(tmp_path / "local" / "raw" / "2026-02-13-82e15a4" / "manifest.json") if run_cli(
        "fetch", "--source", COMMITS["82e15a4"].folder, "--out", tmp_path / "local").exit_code == 0 else None
    assert local is not None and manifest["files"] == local["files"]
    assert github.api_requests() and {r["authorization"] for r in github.api_requests()} == {"Bearer test-token"}
    assert github.raw_requests() and {r["authorization"] for r in github.raw_requests()} == {None}

    # Offline: the held commit, named in full, is refreshed without a request; following the newest
    # fails at once with one line naming what was tried and the two ways on.
    for setting in (GITHUB_API, GITHUB_RAW):
        monkeypatch.setenv(setting.name, "http://127.0.0.1:9")
    github.requests.clear()
    again = run_cli("fetch", "--commit", COMMITS["82e15a4"].sha, "--out", out)
    assert again.exit_code == 0 and "(unchanged," in again.stderr and not github.requests
    started = time.monotonic()
    offline = run_cli("refresh", "--out", out, "--fetch-deadline", "5")
    assert offline.exit_code == 1 and time.monotonic() - started < 5
    (error,) = [line for line in offline.stderr.splitlines() if line.startswith("energy-index: error:")]
    assert "http://127.0.0.1:9/repos/ml-energy/leaderboard/commits?path=public%2Fdata" in error
    assert "make SOURCE=<folder>" in error and "make COMMIT=<sha>" in error
    assert (out / "raw" / "LATEST").read_text() == "2026-02-13-82e15a4\n"


def test_a_rate_limit_answer_is_one_line_with_the_reset_time(github: FakeGitHub, tmp_path: Path, run_cli) -> None:
    github.commits = [COMMITS["7885788"]]
    github.rate_limit_reset = int(time.time()) + 1800
    result = run_cli("refresh", "--out", tmp_path / "out")
    assert result.exit_code == 1
    (error,) = [line for line in result.stderr.splitlines() if "error" in line]
    reset = datetime.fromtimestamp(github.rate_limit_reset, timezone.utc)
    assert "GitHub's rate limit is used up (60 requests an hour without GITHUB_TOKEN; set one for 5,000)" in error
    assert f"it resets at {reset:%Y-%m-%d %H:%M:%S} UTC (in 30 min)" in error
    assert "make SOURCE=<folder>" in error and not github.raw_requests()
    assert not (tmp_path / "out" / "current").exists()


def assert_same_tables(by_api: Path, by_folder: Path, ids: list[str]) -> None:
    """Every table of every snapshot equal, but where a snapshot came from and when: the API gives times
    in UTC (the same instants), and so the task files' last commit date a day later in the evening."""
    for table in TABLE_NAMES:
        for snapshot in ids:
            api_rows = pq.read_table(Paths(by_api).parquet_path(table, snapshot)).to_pylist()
            folder_rows = pq.read_table(Paths(by_folder).parquet_path(table, snapshot)).to_pylist()
            if table == "snapshots":
                ((api_row,), (folder_row,)) = api_rows, folder_rows
                assert api_row.pop("commit_time") == folder_row.pop("commit_time")
                days = (api_row.pop("tasks_last_commit_date") - folder_row.pop("tasks_last_commit_date")).days
                assert days in (0, 1), snapshot
                for column in ("source", "retrieved"):
                    api_row.pop(column), folder_row.pop(column)
            assert api_rows == folder_rows, f"{table} {snapshot}"


@pytest.mark.sweep
def test_history_upstream_follows_pages_resumes_after_a_kill_and_fetches_nothing_it_holds(
    github: FakeGitHub, tmp_path: Path, run_cli
) -> None:
    chosen = [COMMITS["281c69e"], COMMITS["6e70d23"]]
    github.commits = [COMMITS["e0ba9ed"], *chosen]  # the first is older than --since
    github.max_page_size = 1  # the listing takes two pages
    out = tmp_path / "out"
    gate = threading.Event()
    github.held_back[f"{chosen[1].sha}/index.json"] = gate
    since = ("--since", "2025-12-16")
    run = subprocess.Popen([CLI, "history", "--upstream", *since, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in run.stderr:
            lines.append(line)
            if line.startswith("history: fetched 1/2"):
                break
        run.kill()  # while the second commit's first file is on its way
    finally:
        run.wait(timeout=60)
        gate.set()
    text = "".join(lines)
    assert "history: 2 commit(s); 0 already fetched, 2 to fetch" in text, text
    assert "history: fetched 1/2: 2025-12-18-281c69e (Add average output length column)" in text
    assert any("page=2" in r["path"] for r in github.api_requests())
    assert not (out / "current").exists()

    github.requests.clear()
    resumed = run_cli("history", "--upstream", *since, "--out", out)
    assert resumed.exit_code == 0, resumed.stderr
    assert "history: 2 commit(s); 1 already fetched, 1 to fetch" in resumed.stderr
    assert {r["path"].split("/")[4] for r in github.raw_requests()} == {chosen[1].sha}
    ids = ["2025-12-18-281c69e", "2026-01-01-6e70d23"]
    assert snapshot_ids(out) == ids == [snapshot_id(commit.folder) for commit in chosen]

    by_folder = tmp_path / "by-folder"
    assert run_cli("history", "--source", *[commit.folder for commit in chosen], "--out", by_folder).exit_code == 0
    assert snapshot_ids(by_folder) == ids
    assert_same_tables(out, by_folder, ids)
    for task in ("gpqa", "text-to-image"):
        assert (out / "index" / task / "index.json").read_bytes() == (by_folder / "index" / task / "index.json").read_bytes()

    github.requests.clear()
    before = mtimes(out)
    again = run_cli("history", "--upstream", *since, "--out", out)
    assert again.exit_code == 0 and "history: 2 snapshot(s) built and published with these parameters and this code; nothing to do" in again.stderr
    assert github.raw_requests() == [] and len(github.api_requests()) == 2
    assert mtimes(out) == before


@pytest.mark.slow
def test_history_upstream_reproduces_the_eleven_shared_snapshots(
    github: FakeGitHub, history_build: Paths, tmp_path: Path, run_cli
) -> None:
    github.commits = list(COMMITS.values())
    github.max_page_size = 4
    out = tmp_path / "out"
    result = run_cli("history", "--upstream", "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    assert result.exit_code == 0, result.stderr
    ids = snapshot_ids(history_build.out)
    assert snapshot_ids(out) == ids and len(ids) == 11
    assert sorted(ids) == sorted(snapshot_id(path) for path in SNAPSHOTS)
    assert_same_tables(out, history_build.out, ids)
    assert tree_digest(out, "index") == tree_digest(history_build.out, "index")


def test_conflicting_or_malformed_upstream_options_are_refused(tmp_path: Path, run_cli, capsys) -> None:
    from pipeline.cli import main

    for argv, message in [
        (["fetch", "--commit", "HEAD~1"], "'HEAD~1' is not a commit hash (7 to 40 lower-case hex digits"),
        (["refresh", "--commit", "7885788", "--source", str(SNAPSHOTS[-1])], "give --source or --commit, not both"),
        (["history", "--upstream", "--since", "last week"], "'last week' is not a calendar date"),
        (["history"], "give --source or --upstream"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--out", str(tmp_path)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, argv
    result = run_cli("history", "--source", SNAPSHOTS[-1], "--since", "2026-01-01", "--out", tmp_path)
    assert result.exit_code == 1 and "--since goes with --upstream" in result.stderr
    result = run_cli("refresh", "--commit-time", "2026-01-01T00:00:00Z", "--out", tmp_path)
    assert result.exit_code == 1 and "--commit-time is for a --source without snapshot.json" in result.stderr
    through_make = make(tmp_path, "COMMIT=not-a-commit")
    assert through_make.returncode == 2 and "'not-a-commit' is not a commit hash" in through_make.stderr
