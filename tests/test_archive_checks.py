"""The archive (OUT/raw) is checked like the published files: by stat on the no-op path, where a damaged
copy is fetched again; by sha256 (and, for a commit's copy, against its index.json) before anything is
ingested from it, where a damaged copy is refused with advice that works as written."""

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import COMMITS, NEWEST, PROJECT, copy_build, refresh_args, snapshot_id
from github_server import FakeGitHub

from pipeline.archive import MANIFEST
from pipeline.fingerprint import file_sha256
from pipeline.paths import Paths

ARCHIVED = "tasks/gpqa.json"
ADVICE = re.compile(r"fetch it again \('([^']+)'\) and run again$")


def damage(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:  # one bit, same size: only a digest sees it
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x04
        path.write_bytes(bytes(data))


def whole(out: Path, snapshot: str) -> bool:
    folder = out / "raw" / snapshot
    manifest = json.loads((folder / MANIFEST).read_text())
    return all((folder / entry["path"]).is_file() and file_sha256(folder / entry["path"]) == entry["sha256"]
               for entry in manifest["files"])


def follow(advice: str) -> subprocess.CompletedProcess[str]:
    """Run the advised command exactly as written, from the project folder (where it was printed)."""
    return subprocess.run(shlex.split(advice), cwd=PROJECT, capture_output=True, text=True, timeout=600)


@pytest.fixture
def built(tmp_path: Path, plain_build: Paths) -> Path:
    """What `energy-index refresh --source NEWEST --out OUT` publishes (the session's plain build, copied):
    the archive a test damages is this copy's."""
    return copy_build(plain_build, tmp_path / "out")


@pytest.mark.parametrize("how", ["truncate", pytest.param("delete", marks=pytest.mark.sweep)])
def test_the_no_op_refresh_sees_a_damaged_archive_and_fetches_it_again(how: str, built: Path, run_cli) -> None:
    snapshot = snapshot_id(NEWEST)
    damage(built / "raw" / snapshot / ARCHIVED, how)
    result = run_cli(*refresh_args(NEWEST, built))
    assert result.exit_code == 0, result.stderr
    assert f"-> {built / 'raw' / snapshot} (new" in result.stderr  # copied again, not "unchanged"
    assert "nothing to do" in result.stderr
    assert whole(built, snapshot)


@pytest.mark.parametrize("how", ["flip", *(pytest.param(how, marks=pytest.mark.sweep) for how in ("truncate", "delete"))])
def test_a_damaged_archive_is_never_ingested_and_the_advice_works(how: str, built: Path, run_cli) -> None:
    snapshot = snapshot_id(NEWEST)
    damage(built / "raw" / snapshot / ARCHIVED, how)
    # A parameter change: the snapshot is ingested again from its archived copy.
    changed = [*refresh_args(NEWEST, built), "--itl-deadline-ms", "250"]
    first = run_cli(*changed)
    if how != "flip":  # the fetch's check by stat finds it first and copies it again
        assert first.exit_code == 0, first.stderr
        assert whole(built, snapshot)
        return
    assert first.exit_code == 1
    last = first.stderr.splitlines()[-1]
    assert last.startswith(f"energy-index: error: {built / 'raw' / snapshot}: {ARCHIVED} differs from what was "
                           "fetched (sha256), so it cannot be ingested again"), last
    assert "ingest:" not in first.stderr
    fetched = follow(ADVICE.search(last).group(1))
    assert fetched.returncode == 0, fetched.stderr
    assert whole(built, snapshot)
    again = run_cli(*changed)
    assert again.exit_code == 0, again.stderr






def test_an_incomplete_archived_commit_is_refused_and_fetched_whole_by_the_advice(
    github: FakeGitHub, tmp_path: Path, run_cli
) -> None:
    newest = next(commit for commit in COMMITS.values() if commit.folder == NEWEST)
    github.commits = [newest]
    out = tmp_path / "out"
    assert run_cli("refresh", "--out", out).exit_code == 0
    # A copy kept incomplete by earlier code: a model file gone, and gone from its manifest too.
    snapshot = snapshot_id(NEWEST)
    folder = out / "raw" / snapshot
    lacking = "models/Qwen__Qwen3-8B__gpqa.json"
    (folder / lacking).unlink()
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = [entry for entry in manifest["files"] if entry["path"] != lacking]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    result = run_cli("refresh", "--out", out, "--itl-deadline-ms", "250")
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]
    assert f"{folder}: it lacks {lacking}, which its index.json names, so it cannot be ingested again" in last
    advice = ADVICE.search(last).group(1)
    assert advice.endswith(f"fetch --commit {newest.sha} --out {shlex.quote(str(out))}"), advice
    fetched = follow(advice)
    assert fetched.returncode == 0, fetched.stderr
    assert (folder / lacking).is_file() and whole(out, snapshot)
    assert run_cli("refresh", "--out", out, "--itl-deadline-ms", "250").exit_code == 0
