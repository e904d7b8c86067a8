"""energy-index verify reads every byte of OUT: each published file against published-files.json, the raw
archive against its manifests, each published snapshot's archived copy; exit 0 when all is intact, 1 naming
each damaged file with the command that repairs it, and the repairs, run as printed, make it intact again."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (NEWEST, PROJECT, SEED_AS_OF, SEED_RETRIEVED, cli, copy_build, make, refresh_args,
                      snapshot_id, tree_digest)

from pipeline.errors import command_name
from pipeline.paths import Paths

REPAIR = re.compile(r"^  - (.+?): (.+); repair: (.+)$")
ARCHIVED = "tasks/gpqa.json"
PUBLISHED = "index/gpqa/index.json"


def flip_a_digit(path: Path) -> None:
    """One digit of a number changed: the same size, so only a digest sees it."""
    data = bytearray(path.read_bytes())
    at = re.search(rb"\d\.\d", bytes(data)).start()
    data[at] = ord("7") if data[at] != ord("7") else ord("8")
    path.write_bytes(bytes(data))


def damage_listed(stderr: str) -> list[tuple[str, str, str]]:
    """(path, problem, repair) of each damaged file verify named."""
    return [match.groups() for line in stderr.splitlines() if (match := REPAIR.match(line))]


def follow(command: str) -> None:
    """Run a repair exactly as printed, from the project folder (where it was printed)."""
    done = subprocess.run(shlex.split(command), cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (command, done.stderr)


def everything(out: Path) -> dict[str, str]:
    return tree_digest(out, *sorted(path.name for path in out.iterdir() if path.name != ".lock"))


def test_an_intact_build_verifies_and_nothing_is_written(tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    before = everything(out)
    result = cli("verify", "--out", out)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"verify: 170 published files as published and 1 archived snapshot\(s\), 70 files, as "
                        r"fetched; every byte read \(\d+\.\d+ s\)\n", result.stderr), result.stderr
    assert cli("verify", "--quiet", "--out", out).stderr == ""
    through_make = make("verify", f"OUT={out}", "QUIET=1")
    assert (through_make.returncode, through_make.stderr) == (0, "")
    assert everything(out) == before


def test_a_changed_digit_in_the_archive_and_a_deleted_published_file_are_named_and_repaired(
    tmp_path: Path, plain_build: Paths
) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    archive = out / "raw" / snapshot_id(NEWEST)
    flip_a_digit(archive / ARCHIVED)
    # The nightly refresh checks the archive by size: the changed digit passes it.
    nightly = cli(*refresh_args(NEWEST, out))
    assert nightly.returncode == 0 and "nothing to do" in nightly.stderr, nightly.stderr
    (out / "current" / PUBLISHED).unlink()
    result = cli("verify", "--out", out)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == (f"energy-index: error: {out}: 2 damaged file(s) or missing copies; repair them in the order "
                        "listed")
    command = command_name()  # as it can be typed here: .venv/bin/energy-index from the project folder
    assert damage_listed(result.stderr) == [
        (str(archive), f"{ARCHIVED} differs from what was fetched (sha256)",
         f"{command} fetch --source {NEWEST} --out {out}"),
        (str(out / "current" / PUBLISHED), "missing", f"{command} refresh --source {NEWEST} --out {out}"),
    ]
    assert len(lines) == 3
    for _, _, repair in damage_listed(result.stderr):
        follow(repair)
    again = cli("verify", "--out", out)
    assert again.returncode == 0, again.stderr


def test_the_repair_rebuilds_with_the_published_parameters_byte_for_byte(tmp_path: Path, newest_build: Paths) -> None:
    out = copy_build(newest_build, tmp_path / "out")
    published = tree_digest(out, "index", "parquet")
    (out / "current" / PUBLISHED).unlink()  # its 'updated' is the --as-of date: another date, other bytes
    (_, problem, repair), = damage_listed(cli("verify", "--out", out).stderr)
    assert problem == "missing"
    assert repair.endswith(f"refresh --source {NEWEST} --as-of {SEED_AS_OF} --retrieved {SEED_RETRIEVED} --out {out}")
    follow(repair)
    assert tree_digest(out, "index", "parquet") == published
    assert cli("verify", "--out", out).returncode == 0


def test_a_published_snapshot_whose_archived_copy_is_gone_is_named(tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    shutil.rmtree(archive := out / "raw" / snapshot_id(NEWEST))
    result = cli("verify", "--out", out)
    assert result.returncode == 1
    assert damage_listed(result.stderr) == [(
        str(archive), "missing: the fetched copy of a published snapshot, which a full rebuild ingests again",
        f"{command_name()} fetch --source {NEWEST} --out {out}")]
    follow(damage_listed(result.stderr)[0][2])
    assert cli("verify", "--out", out).returncode == 0


@pytest.mark.parametrize("what", [pytest.param("record", marks=pytest.mark.sweep), "manifest"])
def test_a_record_that_cannot_be_read_is_damage_too(what: str, tmp_path: Path, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    lost = out / "current" / "published-files.json" if what == "record" else out / "raw" / snapshot_id(NEWEST) / \
        "manifest.json"
    lost.write_text("{")
    result = cli("verify", "--out", out)
    assert result.returncode == 1
    (path, problem, repair), = damage_listed(result.stderr)
    if what == "record":
        assert (path, problem) == (str(lost), "missing or unreadable, so no published file can be vouched for")
    else:
        assert (path, problem) == (str(lost.parent), "its manifest is missing or unreadable")
    follow(repair)
    assert cli("verify", "--out", out).returncode == 0


def test_an_empty_out_is_not_intact(tmp_path: Path) -> None:
    result = cli("verify", "--out", tmp_path / "nothing")
    assert (result.returncode, result.stderr.splitlines()[0]) == (
        1, f"energy-index: error: {tmp_path / 'nothing'}: nothing has been fetched or published there to verify; "
           f"run 'make OUT={tmp_path / 'nothing'}' (or '{command_name()} refresh --source FOLDER_OR_URL "
           f"--out {tmp_path / 'nothing'}')")
    assert not (tmp_path / "nothing").exists()


def test_an_archive_without_a_published_build_is_verified_as_such(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("fetch", "--source", NEWEST, "--out", out).returncode == 0
    result = cli("verify", "--out", out)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("verify: nothing published yet and 1 archived snapshot(s), 70 files, as fetched")
