"""What the upstream gives is taken whole or not at all: a commit whose tree, or a local folder that, lacks a
file its own index.json names is refused before anything is published or kept, and history --upstream takes one consistent
listing however the branch moves between its pages."""

import dataclasses
import shutil
from pathlib import Path

import pytest
from conftest import BUILD_OUTPUTS, COMMITS, NEWEST, copy_build, refresh_args, snapshot_id, tree_digest, writable_copy
from github_server import FakeGitHub

from pipeline.paths import Paths


def snapshot_ids(out: Path) -> list[str]:
    return sorted(path.name.removeprefix("snapshot_id=") for path in (out / "parquet" / "snapshots").iterdir())


@pytest.mark.parametrize("lacking", ["models/Qwen__Qwen3-8B__gpqa.json",
                                     pytest.param("tasks/gpqa.json", marks=pytest.mark.sweep)],
                         ids=["model-file", "task-file"])
@pytest.mark.parametrize("command", ["refresh", pytest.param("history", marks=pytest.mark.sweep)])
def test_a_commit_whose_tree_lacks_a_file_its_index_names_is_refused_and_nothing_kept(
    lacking: str, command: str, github: FakeGitHub, tmp_path: Path, run_cli
) -> None:
    incomplete = tmp_path / "incomplete"
    shutil.copytree(NEWEST, incomplete)
    (incomplete / lacking).chmod(0o644)
    (incomplete / lacking).unlink()
    newest = next(commit for commit in COMMITS.values() if commit.folder == NEWEST)
    github.commits = [dataclasses.replace(newest, folder=incomplete)]
    out = tmp_path / "out"
    result = run_cli(command, *(["--upstream"] if command == "history" else []), "--out", out)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"energy-index: error: {github.raw}/ml-energy/leaderboard/{newest.sha}/public/data: the commit's tree lacks "
        f"{lacking}, which its own index.json names; an incomplete snapshot is refused (nothing was kept)")
    assert not (out / "current").exists() and not (out / "index").exists()
    raw = out / "raw"
    assert not raw.is_dir() or not any(path.is_dir() and not path.name.startswith(".") for path in raw.iterdir())
    # Once the upstream has the file again, the commit is fetched whole and published.
    github.commits = [newest]
    again = run_cli(command, *(["--upstream"] if command == "history" else []), "--out", out)
    assert again.exit_code == 0, again.stderr
    assert snapshot_ids(out) == [snapshot_id(NEWEST)]


@pytest.mark.parametrize("lacking", ["models/Qwen__Qwen3-8B__gpqa.json", "tasks/gpqa.json"],
                         ids=["model-file", "task-file"])
def test_a_local_folder_that_lacks_a_file_its_index_names_is_refused_and_the_build_left(
    lacking: str, tmp_path: Path, plain_build: Paths, run_cli
) -> None:
    incomplete = writable_copy(NEWEST, tmp_path / "incomplete")
    (incomplete / "snapshot.json").unlink()  # a snapshot of its own, not the published one's content changed
    (incomplete / lacking).unlink()
    out = copy_build(plain_build, tmp_path / "out")
    published, raw = tree_digest(out, *BUILD_OUTPUTS), sorted(path.name for path in (out / "raw").iterdir())
    result = run_cli(*refresh_args(incomplete, out))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"energy-index: error: {incomplete}: the folder lacks {lacking}, which its own index.json names; an "
        "incomplete snapshot is refused (nothing was kept)")
    assert "ingest:" not in result.stderr and "warning" not in result.stderr
    assert tree_digest(out, *BUILD_OUTPUTS) == published  # the last good build, as it was
    assert sorted(path.name for path in (out / "raw").iterdir()) == raw  # nothing of it kept


@pytest.mark.sweep
def test_history_upstream_pins_its_listing_when_the_newest_commit_drops_out_between_pages(
    github: FakeGitHub, tmp_path: Path, run_cli
) -> None:
    chosen = [COMMITS["e0ba9ed"], COMMITS["281c69e"], COMMITS["6e70d23"]]
    github.commits = chosen
    github.max_page_size = 2  # two pages: the newest two, then the oldest

    def drop_the_newest(query: dict[str, str]) -> None:
        if query.get("page", "1") == "1" and "sha" not in query and query.get("path") == "public/data":
            github.dropped.add(chosen[-1].sha)  # force-pushed away once the first page is answered

    github.after_listing = drop_the_newest
    out = tmp_path / "out"
    result = run_cli("history", "--upstream", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "history: 3 commit(s); 0 already fetched, 3 to fetch" in result.stderr
    assert snapshot_ids(out) == sorted(snapshot_id(commit.folder) for commit in chosen)
    pages = [r["path"] for r in github.api_requests() if "page=2" in r["path"]]
    assert pages and all(f"sha={chosen[-1].sha}" in page for page in pages), pages


@pytest.mark.sweep
def test_history_upstream_is_unmoved_by_a_commit_pushed_between_pages(github: FakeGitHub, tmp_path: Path,
                                                                       run_cli) -> None:
    chosen = [COMMITS["e0ba9ed"], COMMITS["281c69e"], COMMITS["6e70d23"]]
    github.commits = list(chosen)
    github.max_page_size = 2
    pushed = COMMITS["0578467"]

    def push(query: dict[str, str]) -> None:
        if query.get("page", "1") == "1" and "sha" not in query and pushed not in github.commits:
            github.commits.append(pushed)

    github.after_listing = push
    out = tmp_path / "out"
    result = run_cli("history", "--upstream", "--out", out)
    assert result.exit_code == 0, result.stderr
    # The listing as it stood when its first page was answered: the three, once each.
    assert snapshot_ids(out) == sorted(snapshot_id(commit.folder) for commit in chosen)
    assert Paths(out).current.is_dir()
