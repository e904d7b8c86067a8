"""diff over the eleven shared snapshots: each moved index row names the upstream commits that moved it
(checked against the database's own history of each row), and a bare commit hash stands for a snapshot id."""

import json
from datetime import datetime
from pathlib import Path

import duckdb
import msgspec
import pytest

from conftest import NEWEST, SNAPSHOTS, cli, read_json, snapshot_id, writable_copy

from pipeline.errors import PipelineError, snapshot_id_for
from pipeline.paths import Paths

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
    commits = {snapshot_id(folder): read_json(folder / "snapshot.json")["commit"] for folder in SNAPSHOTS}
    assert snapshot_id_for("0ea5", commits) == snapshot_id_for("0EA52B6", commits) == "2026-02-13-0ea52b6"
    assert snapshot_id_for("2026-02-13", commits) == "2026-02-13"  # not a hash: left for the caller to name
    with pytest.raises(PipelineError, match="commit 0578 is ambiguous: snapshots a-0578467, b-0578999"):
        snapshot_id_for("0578", {"a-0578467": "0578467" + "0" * 33, "b-0578999": "0578999" + "0" * 33})


def test_a_bare_hash_is_matched_on_every_digit_given(history_build: Paths) -> None:
    full = read_json(SNAPSHOTS[0] / "snapshot.json")["commit"]
    wrong = full[:7] + ("0" if full[7] != "0" else "1") + full[8:]  # the first 7 digits right, the 8th wrong
    refused = cli("diff", "--out", history_build.out, wrong, "7885788")
    assert refused.returncode == 1 and f"snapshot {wrong} is not in" in refused.stderr, refused.stderr
    # Two commits that share their first 7 digits: each full hash (or more than 7 digits) names its own.
    commits = {"2026-01-01-abcdef1": "abcdef1" + "2" * 33, "2026-01-02-abcdef1": "abcdef1" + "3" * 33}
    assert snapshot_id_for("abcdef1" + "2" * 33, commits) == "2026-01-01-abcdef1"
    assert snapshot_id_for("ABCDEF13", commits) == "2026-01-02-abcdef1"
    assert snapshot_id_for("abcdef1" + "4" * 33, commits) == "abcdef1" + "4" * 33  # named by the caller's error
    with pytest.raises(PipelineError, match="commit abcdef1 is ambiguous: snapshots 2026-01-01-abcdef1, "
                                            "2026-01-02-abcdef1"):
        snapshot_id_for("abcdef1", commits)
    assert snapshot_id_for("abcdef1", {"local-abcdef123456": None}) == "abcdef1"  # no commit, no hash to match


def test_full_hashes_of_two_commits_that_share_7_digits_name_each_snapshot(tmp_path: Path) -> None:
    out, hashes = tmp_path / "out", ["abcdef1" + "2" * 33, "abcdef1" + "3" * 33]
    for day, commit in enumerate(hashes, start=1):
        source = writable_copy(NEWEST, tmp_path / commit)
        facts = read_json(source / "snapshot.json") | {"commit": commit, "commit_time": f"2026-03-0{day}T12:00:00Z"}
        (source / "snapshot.json").write_text(json.dumps(facts))
        published = cli("refresh", "--source", source, "--out", out)
        assert published.returncode == 0, published.stderr
    diff = cli("diff", "--out", out, *hashes, "--format", "json")
    assert diff.returncode == 0, diff.stderr
    found = msgspec.json.decode(diff.stdout)
    assert (found["older_snapshot_id"], found["newer_snapshot_id"]) == ("2026-03-01-abcdef1", "2026-03-02-abcdef1")
    ambiguous = cli("diff", "--out", out, "abcdef1", hashes[1])
    assert ambiguous.returncode == 1 and "commit abcdef1 is ambiguous" in ambiguous.stderr
    built = cli("build", "--out", out, "--snapshot", hashes[0])
    assert built.returncode == 0, built.stderr
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        assert connection.execute("select snapshot_id from index_snapshot").fetchall() == [("2026-03-01-abcdef1",)]
