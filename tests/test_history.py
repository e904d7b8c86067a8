"""All eleven real snapshots in one database: order, appending, and the changes the upstream's commit
messages describe."""

import re
from datetime import datetime
from pathlib import Path

import duckdb
import msgspec
import pytest
from conftest import NEWEST, SEED, SNAPSHOTS, cli, read_json, refresh_args, snapshot_id, writable_copy

from pipeline.cli import main
from pipeline.paths import Paths


@pytest.fixture(scope="module")
def history(history_build: Paths) -> Paths:
    return history_build


def query(paths: Paths, sql: str, *parameters: object) -> list[tuple]:
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        return connection.execute(sql, list(parameters)).fetchall()


def changed_fields(paths: Paths, newer: str) -> dict[str, int]:
    return dict(query(
        paths,
        "select coalesce(field, change), count(*) from configuration_changes where newer_snapshot_id = ? group by 1",
        newer,
    ))


def test_history_orders_snapshots_by_upstream_commit_time(history: Paths) -> None:
    commit_times = {snapshot_id(path): datetime.fromisoformat(read_json(path / "snapshot.json")["commit_time"])
                    for path in SNAPSHOTS}
    ordered = [row[0] for row in query(history, "select snapshot_id from snapshot_history order by position")]
    assert ordered == sorted(commit_times, key=commit_times.__getitem__)
    assert ordered != sorted(commit_times)  # the folder names alone would misorder 2026-02-13


def test_the_index_of_a_history_is_the_newest_snapshot_and_matches_the_seed(history: Paths) -> None:
    assert query(history, "select snapshot_id from index_snapshot") == [(NEWEST.name,)]
    exported = history.task_index_dir("lm-arena-chat") / "models" / "llama-4-scout-17b-16e-instruct.json"
    assert exported.read_bytes() == SEED.read_bytes()
    counts = dict(query(history, "select snapshot_id, count(*) from configuration_history group by 1"))
    assert len(counts) == 11 and set(counts.values()) == {838}


@pytest.mark.parametrize(
    ("newer", "expected"),
    [
        ("2025-11-30-2689bff", {"added": 189}),  # "Update data": text-to-image configurations added
        ("2025-12-01-f74deb8", {"weight_precision": 1020}),  # "Column updates": diffusion precision added
        ("2025-12-15-e0ba9ed", {"data_parallel": 822, "expert_parallel": 404}),  # "Parallelism default to 1"
        ("2025-12-18-281c69e", {}),  # "Add average output length column": equals the derived value
        ("2026-01-01-6e70d23", {"output_throughput_tokens_per_sec": 838}),  # "Fix steady state token throughput"
        ("2026-02-13-f76e8d3", {}),  # "Deterministic JSON generation (no actual data change)"
        ("2026-02-16-7885788", {"tensor_parallel": 132}),  # tensor-parallel degrees corrected
    ],
)
def test_each_snapshot_changes_what_its_commit_message_says(history: Paths, newer: str, expected: dict) -> None:
    assert changed_fields(history, newer) == expected


def test_parallel_degrees_went_from_zero_to_one(history: Paths) -> None:
    transitions = dict(query(
        history,
        "select old_value || ' -> ' || new_value, count(*) from configuration_changes"
        " where newer_snapshot_id = '2025-12-15-e0ba9ed' and field = 'data_parallel' group by 1",
    ))
    assert transitions.pop("0.0 -> 1.0") >= 800
    # "fix Qwen 3 Coder DP degree": the remaining changes are Qwen3-Coder's real degrees.
    coder = query(
        history,
        "select distinct model_id from configuration_changes where newer_snapshot_id = '2025-12-15-e0ba9ed'"
        " and field = 'data_parallel' and old_value != '0.0'",
    )
    assert transitions == {} or all("Coder" in row[0] for row in coder)


def test_index_rows_move_only_where_new_measurements_beat_the_old_best(history: Paths) -> None:
    changes = query(
        history,
        "select newer_snapshot_id, change, task, gpu, relative_change from index_changes order by all",
    )
    # "Update data" (2025-11-30) added 189 diffusion configurations on B200 with fewer GPUs: they became
    # the best for ten models and brought CogVideoX-2b into the index. No token-task row ever moved.
    assert {row[0] for row in changes} == {"2025-11-30-2689bff"}
    assert {row[2] for row in changes} == {"text-to-image", "text-to-video"}
    moved = [row for row in changes if row[1] == "best configuration changed"]
    assert len(moved) == 10 and all(row[3] == "B200" and row[4] < 0 for row in moved)
    assert [row[1:3] for row in changes if row[1] != "best configuration changed"] == [("added", "text-to-video")]


def test_diff_output(history: Paths, capsys) -> None:
    assert main(["diff", "2025-12-01-f74deb8", "2025-12-15-e0ba9ed", "--out", str(history.out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("2025-12-01-f74deb8 → 2025-12-15-e0ba9ed (numbers equal within a relative 1e-09)")
    assert re.search(r"^  data_parallel +822 ", text, re.MULTILINE)
    assert "index rows changed: 0" in text
    assert main(["diff", "2025-11-30-9fa07d1", "2025-11-30-2689bff", "--out", str(history.out)]) == 0
    assert re.search(r"other config +text-to-image +black-forest-labs/FLUX.1-dev +B200", capsys.readouterr().out)
    # Given newest first, the pair is still compared oldest first.
    assert main(["diff", "2026-02-13-f76e8d3", "2026-02-13-0ea52b6", "--out", str(history.out), "--format", "json"]) == 0
    document = msgspec.json.decode(capsys.readouterr().out)
    assert document["older_snapshot_id"] == "2026-02-13-0ea52b6"
    assert document["configuration_changes"] == [] and document["index_changes"] == []


def test_diff_names_an_unknown_snapshot(history: Paths, run_cli) -> None:
    result = run_cli("diff", "2025-12-01-f74deb8", "no-such-snapshot", "--out", history.out)
    assert result.exit_code == 1
    assert "snapshot no-such-snapshot is not in" in result.stderr
    assert f"energy-index snapshots --out {history.out}' lists the 11 it holds" in result.stderr


def test_a_refresh_appends_a_snapshot_and_never_rewrites_an_old_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first, second = SNAPSHOTS[0], SNAPSHOTS[1]
    assert main(["history", "--source", str(first), "--out", str(out)]) == 0
    paths = Paths(out)
    old_file = paths.parquet_path("token_configurations", snapshot_id(first))
    before = (old_file.read_bytes(), old_file.stat().st_ino)
    assert main(refresh_args(second, out)) == 0
    assert (old_file.read_bytes(), old_file.stat().st_ino) == before
    assert query(paths, "select snapshot_id from snapshot_history order by position") == [(snapshot_id(first),), (snapshot_id(second),)]
    assert query(paths, "select snapshot_id from index_snapshot") == [(snapshot_id(second),)]


def test_history_over_a_folder_names_the_snapshot_whose_file_is_missing(tmp_path: Path) -> None:
    folder, older, newer = tmp_path / "snapshots", SNAPSHOTS[-2], SNAPSHOTS[-1]
    for snapshot in (older, newer):
        writable_copy(snapshot, folder / snapshot.name)
    (folder / older.name / "tasks" / "gpqa.json").unlink()
    missing_task = cli("history", "--source", folder, "--out", tmp_path / "out", "--quiet")
    assert missing_task.returncode == 1
    # The fetch refuses the incomplete folder by its name before anything is ingested.
    assert missing_task.stderr.splitlines() == [
        f"energy-index: error: {folder / older.name}: the folder lacks tasks/gpqa.json, which its own index.json "
        "names; an incomplete snapshot is refused (nothing was kept)"]
    # A snapshot folder without its index.json is refused by name, not passed over.
    (folder / older.name / "index.json").unlink()
    missing_index = cli("history", "--source", folder, "--out", tmp_path / "out2", "--quiet")
    assert missing_index.returncode == 1 and not (tmp_path / "out2").exists()
    assert missing_index.stderr.splitlines() == [
        f"energy-index: error: {folder}: snapshot folder(s) {older.name} have no index.json, though the other 1 "
        "folder(s) there are snapshots; restore it, or name the snapshots to ingest one by one"]
