"""The CLI's words to a user: options checked before any work, dead ends that name what to run, help and
version, did-you-mean, hints that print the command as it runs here, and output that fits the terminal."""

import os
import re
import shlex
from pathlib import Path

import pytest
from conftest import CLI, NEWEST, PROJECT, UPSTREAM, cli, cli_process, copy_build, make

from pipeline.paths import Paths
from pipeline.settings import LARGEST_SIZE, LONGEST_LIMIT_S


@pytest.mark.parametrize("date", ["2026-02-30", "9999-99-99", "2026-13-45", "27/09/2026", "20260927"])
def test_dates_are_checked_before_any_work_and_named_as_given(tmp_path: Path, date: str) -> None:
    out = tmp_path / "out"
    result = cli("refresh", "--source", NEWEST, "--out", out, "--as-of", date)
    assert result.returncode == 2
    assert f"Invalid value for '--as-of': '{date}' is not a calendar date written YYYY-MM-DD" in result.stderr
    assert not out.exists(), "nothing was fetched, ingested or built"
    retrieved = cli("refresh", "--source", NEWEST, "--out", out, "--retrieved", date)
    assert retrieved.returncode == 2 and "Invalid value for '--retrieved':" in retrieved.stderr
    through_make = make(f"SOURCE={NEWEST}", f"OUT={out}", f"AS_OF={date}")
    assert through_make.returncode == 2 and "is not a calendar date" in through_make.stderr


@pytest.mark.parametrize("moment", ["2026-03-01T12:00:00", "2026-03-01T12:00"])
def test_a_commit_time_without_a_zone_is_one_line_before_any_work(tmp_path: Path, moment: str) -> None:
    out = tmp_path / "out"
    result = cli("refresh", "--source", NEWEST, "--out", out, "--commit-time", moment)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"energy-index: error: Invalid value for '--commit-time': '{moment}' has no time zone; add Z (UTC) or the "
        "offset, e.g. 2026-02-16T09:48:29Z or 2026-02-16T04:48:29-05:00. Try 'energy-index refresh --help' for help."]
    through_make = make(f"SOURCE={NEWEST}", f"OUT={out}", f"COMMIT_TIME={moment}")
    assert through_make.returncode == 2 and "has no time zone" in through_make.stderr
    assert "Traceback" not in through_make.stderr and not out.exists()


def test_every_dead_end_names_what_a_newcomer_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    for command in (["export"], ["build"], ["ingest"], ["diff", "a", "b"], ["snapshots"], ["report"]):
        result = cli(*command, "--out", empty)
        assert result.returncode == 1, command
        assert f"run 'make OUT={empty}' (or '" in result.stderr and "energy-index refresh --source" in result.stderr, command
        assert ".generations" not in result.stderr and "staging" not in result.stderr, command
    missing = cli("refresh", "--source", tmp_path / "nowhere", "--out", empty)
    assert missing.returncode == 1 and "no such folder" in missing.stderr
    parent = cli("refresh", "--source", UPSTREAM, "--out", empty)
    assert parent.returncode == 1
    assert "a folder of snapshot folders" in parent.stderr and "energy-index history --source" in parent.stderr
    assert not (empty / "raw").exists()
    offline = cli("refresh", "--source", "http://127.0.0.1:9/data", "--out", empty, "--timeout", "2")
    assert offline.returncode == 1 and "make SOURCE=<folder>" in offline.stderr


def test_help_version_did_you_mean_and_snapshots(history_build: Paths) -> None:
    bare = cli()
    assert bare.returncode == 0 and "COMMAND" in bare.stdout and "refresh" in bare.stdout
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("energy-index 0.")
    typo = cli("refersh")
    assert typo.returncode == 2 and "Did you mean 'refresh'?" in typo.stderr
    from pipeline.cli import COMMAND_MODULES
    from schemas import TABLE_NAMES

    for name in COMMAND_MODULES:
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


def test_output_fits_100_columns_and_each_command_ends_with_a_summary(tmp_path: Path) -> None:
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
    assert "about 2½ minutes" in make("-n", "test").stdout


def test_hints_print_the_command_as_it_runs_here_and_honour_out(tmp_path: Path) -> None:
    empty = tmp_path / "empty dir"
    without_venv = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = cli_process("snapshots", "--out", empty, cwd=PROJECT, env=without_venv)
    assert result.returncode == 1
    quoted = shlex.quote(str(empty))
    assert (f"run 'make OUT={quoted}' (or '.venv/bin/energy-index refresh --source FOLDER_OR_URL --out {quoted}')"
            in result.stderr), result.stderr
    with_venv = {**os.environ, "PATH": f"{Path(CLI).parent}:/usr/bin:/bin"}
    on_path = cli_process("snapshots", "--out", empty, cwd=PROJECT, env=with_venv)
    assert f"(or 'energy-index refresh --source FOLDER_OR_URL --out {quoted}')" in on_path.stderr
    default = cli_process("snapshots", cwd=tmp_path, env=without_venv)
    assert f"run 'make' (or '{CLI} refresh --source FOLDER_OR_URL')" in default.stderr
    assert not empty.exists() and not (tmp_path / "build").exists()


def test_did_you_mean_for_snapshot_ids_and_source_folders(newest_build: Paths, tmp_path: Path) -> None:
    diff = cli("diff", "2026-02-16", "2026-02-1", "--out", newest_build.out)
    assert diff.returncode == 1
    assert "snapshot 2026-02-16 is not in" in diff.stderr and f"did you mean {NEWEST.name}?" in diff.stderr
    source = cli("refresh", "--source", UPSTREAM / "2026-02-16", "--out", tmp_path / "out")
    assert source.returncode == 1
    assert f"no such folder; did you mean '{NEWEST}'?" in source.stderr
    assert not (tmp_path / "out").exists()


def test_a_mistyped_out_leaves_no_folder_behind(tmp_path: Path) -> None:
    for command in (["build"], ["report"]):
        result = cli(*command, "--out", tmp_path / "typo" / "deeper")
        assert result.returncode == 1, command
        assert list(tmp_path.iterdir()) == [], command


LONG = "Q" * 10_000


@pytest.mark.parametrize("command", [
    ["estimate", "--task", "lm-arena-chat", "--model", LONG, "--gpu", "H100", "--concurrency", "10"],
    ["estimate", "--task", LONG, "--model", "qwen3-8b", "--gpu", "H100", "--concurrency", "10"],
    ["estimate", "--task", "gpqa", "--model", "qwen3-8b", "--gpu", "H100", "--concurrency", "10", "--precision", LONG],
    ["compare", "--task", "lm-arena-chat", "qwen3-8b", LONG],
    ["compare", "--task", "lm-arena-chat", "qwen3-8b", "qwen3-14b", "--gpu", LONG],
    ["diff", LONG, "7885788"],
    ["build", "--snapshot", LONG],
    ["ingest", "--snapshot", LONG],
    ["sql", f"select * from energy_at_concurrency('gpqa', '{LONG}', 'H100', 10)"],
    ["fetch", "--commit", "abc" + LONG],
    ["fetch", "--source", "/" + LONG],
], ids=lambda command: "-".join(part for part in command if part != LONG and len(part) < 20)[:40])
def test_an_unknown_name_is_echoed_short_on_one_line(plain_build: Paths, tmp_path: Path, command: list[str]) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    result = cli(*command, "--out", out)
    assert result.returncode in (1, 2) and result.stdout == ""
    (line,) = result.stderr.splitlines()
    # The name's first 80 characters (a prefix given with it among them), cut with … and its length.
    assert re.search(r"Q{77,80}…", line) and max(map(len, re.findall("Q+", line))) <= 80, line
    assert "(10,0" in line and " characters)" in line
    assert len(line) < 400, line


@pytest.mark.parametrize(("argv", "option", "value"), [
    (["fetch"], "--timeout", "inf"), (["fetch"], "--timeout", "1e308"), (["fetch"], "--timeout", "86401"),
    (["refresh"], "--fetch-deadline", "inf"), (["refresh"], "--fetch-deadline", "1e308"),
    (["history", "--upstream"], "--max-file-bytes", str(2 ** 61)), (["fetch"], "--max-file-bytes", "0"),
    (["sql", "select 1"], "--timeout", "inf"), (["sql", "select 1"], "--timeout", "1e308"),
])
def test_every_limit_is_finite_with_a_maximum_and_anything_else_a_usage_error(
    argv: list[str], option: str, value: str, tmp_path: Path
) -> None:
    """One rule (docs/operating.md, Limits): no value means "no limit", neither inf nor a huge number."""
    result = cli(*argv, option, value, "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"energy-index: error: Invalid value for '{option}': must be "), result.stderr
    limit = str(LARGEST_SIZE) if option == "--max-file-bytes" else f"at most {LONGEST_LIMIT_S}"
    assert limit in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_longest_limits_are_accepted_and_what_does_not_exist_is_exit_1(tmp_path: Path) -> None:
    """The maximum itself passes the parser (it is the missing SOURCE that stops the command, with exit 1, a
    problem with what the command line names rather than with the command line)."""
    missing = tmp_path / "nowhere"
    result = cli("refresh", "--source", missing, "--timeout", LONGEST_LIMIT_S, "--fetch-deadline", LONGEST_LIMIT_S,
                 "--max-file-bytes", LARGEST_SIZE, "--out", tmp_path / "out")
    assert (result.returncode, result.stderr) == (
        1, f"energy-index: error: '{missing}': no such folder (SOURCE must be a local public/data folder or a URL)\n")
    tiers = cli("build", "--latency-tiers", tmp_path / "tiers.toml", "--out", tmp_path / "out")
    assert (tiers.returncode, tiers.stderr) == (
        1, f"energy-index: error: --latency-tiers '{tmp_path / 'tiers.toml'}': no such file\n")
    assert not (tmp_path / "out").exists()
