"""The first hour (issue 14): each numbered dead end a newcomer met, driven through the real CLI (and
make) as a subprocess, asserting on the exit status and the words a user reads."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NEWEST, PROJECT, UPSTREAM

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))


def cli(*args: str | Path, columns: int = 100) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300, env=environment)


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(PROJECT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("date", ["2026-02-30", "9999-99-99", "2026-13-45", "27/09/2026", "20260927"])
def test_1_dates_are_checked_before_any_work_and_named_as_given(tmp_path: Path, date: str) -> None:
    out = tmp_path / "out"
    result = cli("refresh", "--source", NEWEST, "--out", out, "--as-of", date)
    assert result.returncode == 2
    assert f"Invalid value for '--as-of': '{date}' is not a calendar date written YYYY-MM-DD" in result.stderr
    assert not out.exists(), "nothing was fetched, ingested or built"
    retrieved = cli("refresh", "--source", NEWEST, "--out", out, "--retrieved", date)
    assert retrieved.returncode == 2 and "Invalid value for '--retrieved':" in retrieved.stderr
    through_make = make(f"SOURCE={NEWEST}", f"OUT={out}", f"AS_OF={date}")
    assert through_make.returncode == 2 and "is not a calendar date" in through_make.stderr


def test_2_a_folder_without_snapshot_json_is_dated_with_a_warning_or_refused_in_a_history(tmp_path: Path) -> None:
    undated = tmp_path / "undated"
    shutil.copytree(NEWEST, undated)
    (undated / "snapshot.json").unlink()
    out = tmp_path / "out"
    alone = cli("refresh", "--source", undated, "--out", out)
    assert alone.returncode == 0
    assert "has no commit time (no snapshot.json)" in alone.stderr
    assert "placed in the history by the day it was first fetched" in alone.stderr
    assert "--commit-time" in alone.stderr and "COMMIT_TIME=" in alone.stderr
    # Between two dated snapshots its place would be a guess: refused, naming it and what to do.
    oldest, newest = sorted(UPSTREAM.iterdir())[0], sorted(UPSTREAM.iterdir())[-1]
    mixed = cli("history", "--source", oldest, undated, newest, "--out", tmp_path / "mixed")
    assert mixed.returncode == 1
    assert "have no commit time (no snapshot.json)" in mixed.stderr and str(undated) in mixed.stderr
    # Given a commit time, it takes its place and the warning goes.
    dated = cli("refresh", "--source", undated, "--out", tmp_path / "dated", "--commit-time", "2025-12-20T12:00:00Z")
    assert dated.returncode == 0 and "has no commit time" not in dated.stderr


def test_3_diff_leads_with_a_summary_rounds_like_the_index_and_says_it_swapped(history_build: Paths) -> None:
    out = history_build.out
    result = cli("diff", "2026-02-16-7885788", "2025-11-30-9fa07d1", "--out", out, "--limit", "5")
    assert result.returncode == 0
    assert "2026-02-16-7885788 is newer than 2025-11-30-9fa07d1 in commit order; comparing" in result.stderr
    text = result.stdout
    assert text.startswith("2025-11-30-9fa07d1 → 2026-02-16-7885788")
    assert text.index("Summary") < text.index("Index rows, largest move first") < text.index("Fields changed")
    assert "index rows changed: 11 (10 best configuration changed, 1 added)" in text
    assert "-42.5 %  0.1634 → 0.0939  Wh per image" in text  # 4 decimals per image, as the index files
    assert "None" not in text and "#None" not in text
    assert "ulysses" not in text, "one identity format: the row_id's"
    moves = [line.split()[0] for line in text.splitlines() if line.strip().endswith(("u1r1", "/128"))]
    assert moves
    narrow = cli("diff", "2025-11-30-9fa07d1", "2026-02-16-7885788", "--out", out)
    document = json.loads(cli("diff", "2025-11-30-9fa07d1", "2026-02-16-7885788", "--out", out,
                              "--format", "json").stdout)
    assert list(document)[:5] == ["older_snapshot_id", "newer_snapshot_id", "swapped", "relative_tolerance", "summary"]
    assert document["summary"]["index_rows_changed"] == len(document["index_changes"]) == 11
    assert narrow.returncode == 0


def test_3_diff_fits_a_terminal_width(history_build: Paths) -> None:
    from pipeline.diff import format_text, snapshot_diff

    text = format_text(snapshot_diff(history_build, "2025-11-30-9fa07d1", "2026-02-16-7885788"), 20, width=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "0.1634 → 0.0939" in text, "figures are never cut"


def test_4_every_dead_end_names_what_a_newcomer_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    for command in (["export"], ["build"], ["ingest"], ["diff", "a", "b"], ["snapshots"], ["report"]):
        result = cli(*command, "--out", empty)
        assert result.returncode == 1, command
        assert f"run 'make OUT={empty}' (or '" in result.stderr and "energy-index refresh --source" in result.stderr, command
        assert ".generations" not in result.stderr and "staging" not in result.stderr, command
    missing = cli("refresh", "--source", tmp_path / "nowhere", "--out", empty)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    parent = cli("refresh", "--source", UPSTREAM, "--out", empty)
    assert parent.returncode == 1
    assert "a folder of snapshot folders" in parent.stderr and "energy-index history --source" in parent.stderr
    assert not (empty / "raw").exists()
    offline = cli("refresh", "--source", "http://127.0.0.1:9/data", "--out", empty, "--timeout", "2")
    assert offline.returncode == 1 and "make SOURCE=<folder>" in offline.stderr


def test_5_help_version_did_you_mean_and_snapshots(history_build: Paths) -> None:
    bare = cli()
    assert bare.returncode == 0 and "COMMAND" in bare.stdout and "refresh" in bare.stdout
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("energy-index 0.")
    typo = cli("refersh")
    assert typo.returncode == 2 and "Did you mean 'refresh'?" in typo.stderr
    from pipeline.cli import cli as commands
    from schemas import TABLE_NAMES

    for name in commands.commands:
        text = cli(name, "--help").stdout
        assert "examples:\n    energy-index " + name in text, name
        assert max(len(line) for line in text.splitlines()) <= 100, name
    ingest_help = " ".join(cli("ingest", "--help").stdout.split())
    assert all(table in ingest_help for table in TABLE_NAMES)
    assert "--out" not in cli("synth", "--help").stdout
    listing = cli("snapshots", "--out", history_build.out)
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert len(lines) == 12 and "2026-02-16-7885788" in lines[-1] and "<- the index" in lines[-1]
    make_help = make("help").stdout
    assert "(default)" in make_help and "SOURCE" in make_help and "ITL_DEADLINE_MS  500" in make_help


def test_6_the_audit_summary_says_what_each_number_is_and_covers_every_snapshot_after_history(
    history_build: Paths,
) -> None:
    from pipeline.audit import audit_summary
    from pipeline.errors import command_name

    text = audit_summary(history_build, every_snapshot=True)
    assert "itl_tail_ratio, expected at most 20" in text and "p99 ÷ median inter-token latency (multiple)" in text
    assert "gpu_power_fraction, expected at least 0.2" in text and "share, 0.2 = 20 %" in text
    assert "repeat_measurements_disagree, expected at most 0.1" in text and "relative difference" in text
    assert "energy_per_token_vs_power_over_throughput, expected 0.95 to 1.05" in text
    assert "every snapshot in the database (11)" in text and "2025-11-30-9fa07d1" in text
    command = next(line.strip() for line in text.splitlines() if line.strip().startswith(f"{command_name()} sql"))
    assert command.startswith(f"{command_name()} sql --out {history_build.out} ")
    rows = cli("sql", "--out", history_build.out, command.split('"')[1])
    assert rows.returncode == 0 and rows.stdout.startswith('"snapshot_id"') and len(rows.stdout.splitlines()) == 24


def test_7_output_fits_100_columns_and_each_command_ends_with_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("refresh", "--source", NEWEST, "--out", out)
    assert result.returncode == 0
    long_lines = [line for line in result.stderr.splitlines() if len(line) > 100 and str(out) not in line]
    assert long_lines == []
    assert result.stderr.strip().splitlines()[-1].startswith("refresh: published 2026-02-16-7885788 (")
    history = cli("history", "--source", *sorted(UPSTREAM.iterdir())[:2], "--out", tmp_path / "h")
    assert "history: ingesting 1/2" in history.stderr, "a counter where no terminal draws a bar"
    assert "\r" not in history.stderr + result.stderr and "%|" not in history.stderr, "no bar drawn into a log"
    assert history.stderr.strip().splitlines()[-1].startswith("history: published 2 snapshot(s)")
    assert "about 5 minutes" in make("-n", "test").stdout
