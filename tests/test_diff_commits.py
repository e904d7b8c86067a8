"""diff over the eleven shared snapshots: each moved index row names the upstream commits that moved it
(checked against the database's own history of each row), and a bare commit hash stands for a snapshot id."""

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import msgspec
import pytest

from conftest import SNAPSHOTS, read_json, snapshot_id

from pipeline.errors import PipelineError, snapshot_id_for
from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_diff_takes_bare_commit_hashes_and_names_the_commit_behind_each_moved_row(history_build: Paths) -> None:
    result = cli("diff", "--out", history_build.out, "9fa07d1", "7885788", "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = msgspec.json.decode(result.stdout)
    oldest, newest = snapshot_id(SNAPSHOTS[0]), snapshot_id(SNAPSHOTS[-1])
    assert (diff["older_snapshot_id"], diff["newer_snapshot_id"]) == (oldest, newest)
    subjects = {snapshot_id(folder): read_json(folder / "snapshot.json") for folder in SNAPSHOTS}
    in_commit_order = sorted(SNAPSHOTS, key=lambda folder: datetime.fromisoformat(
        subjects[snapshot_id(folder)]["commit_time"]))
    assert [c["snapshot_id"] for c in diff["commits"]] == [snapshot_id(folder) for folder in in_commit_order[1:]]
    for commit in diff["commits"]:
        upstream = subjects[commit["snapshot_id"]]
        assert (commit["commit"], commit["commit_subject"]) == (upstream["commit"], upstream["commit_subject"])

    # Each row's history, snapshot by snapshot, from the database: a commit is named for a row exactly
    # when the row's configuration or figure differs from the snapshot before.
    order = [c["snapshot_id"] for c in diff["commits"]]
    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        history = {}
        for task, model, gpu, snapshot, row_id, figure in connection.execute(
                "select task, model_id, gpu, snapshot_id, row_id || '#' || repeat, wh_per_unit "
                "from best_configuration_history").fetchall():
            history.setdefault((task, model, gpu), {})[snapshot] = (row_id, figure)
    assert diff["index_changes"]
    for row in diff["index_changes"]:
        states = history[row["task"], row["model_id"], row["gpu"]]
        moved = [snapshot for before, snapshot in zip([oldest, *order], order)
                 if states.get(before, (None, None))[0] != states.get(snapshot, (None, None))[0]
                 or abs((states.get(before, (0, 0))[1] or 0) - (states.get(snapshot, (0, 0))[1] or 0))
                 > 1e-9 * max(states.get(before, (0, 0))[1] or 0, states.get(snapshot, (0, 0))[1] or 0)]
        assert [move["snapshot_id"] for move in row["moved_by"]] == moved, row
        assert moved

    # The text names the commit on each row and lists the commits with their subjects.
    text = cli("diff", "--out", history_build.out, "9fa07d1", "7885788")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("move"))
    assert header.rstrip().endswith("moved by")
    moved_by = {move["commit"][:7] for row in diff["index_changes"] for move in row["moved_by"]}
    listing = lines[lines.index("Upstream commits behind these moves, in commit order"):]
    for commit in diff["commits"]:
        if commit["commit"][:7] in moved_by:
            assert any(line.split()[:2] == [commit["commit"][:7], commit["snapshot_id"]]
                       and line.rstrip().endswith(commit["commit_subject"]) for line in listing), commit


def test_a_full_hash_the_snapshot_id_and_newest_first_agree(history_build: Paths) -> None:
    full = read_json(SNAPSHOTS[0] / "snapshot.json")["commit"]
    by_id = cli("diff", "--out", history_build.out, snapshot_id(SNAPSHOTS[0]), snapshot_id(SNAPSHOTS[-1]),
                "--format", "json")
    by_hash = cli("diff", "--out", history_build.out, full, "7885788", "--format", "json")
    assert by_id.returncode == by_hash.returncode == 0 and by_id.stdout == by_hash.stdout
    swapped = cli("diff", "--out", history_build.out, "7885788", "9fa07d1", "--format", "json")
    assert swapped.returncode == 0 and "is newer than" in swapped.stderr
    assert msgspec.json.decode(swapped.stdout)["older_snapshot_id"] == snapshot_id(SNAPSHOTS[0])


def test_an_unknown_or_ambiguous_hash_is_an_error_naming_it(history_build: Paths) -> None:
    unknown = cli("diff", "--out", history_build.out, "abcdef1", "7885788")
    assert unknown.returncode == 1 and "snapshot abcdef1 is not in" in unknown.stderr
    ids = [snapshot_id(folder) for folder in SNAPSHOTS]
    assert snapshot_id_for("0ea5", ids) == snapshot_id_for("0EA52B6", ids) == "2026-02-13-0ea52b6"
    assert snapshot_id_for("2026-02-13", ids) == "2026-02-13"  # not a hash: left for the caller to name
    with pytest.raises(PipelineError, match="commit 0578 is ambiguous: snapshots a-0578467, b-0578999"):
        snapshot_id_for("0578", ["a-0578467", "b-0578999"])
