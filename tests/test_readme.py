"""README.md is the entry point: short, and what it shows a first run printing is what a first run prints."""

import re
from pathlib import Path

import pytest
from conftest import NEWEST, PROJECT, cli

README = (PROJECT / "README.md").read_text(encoding="utf-8")
MOST_LINES = 300


def _printed_block() -> list[str]:
    """The block that follows the quick start's "prints"."""
    match = re.search(r"prints\n\n```\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert match, "README.md shows no first run's output"
    return match.group(1).splitlines()


def _without_timings(line: str) -> str:
    return re.sub(r"(?<![\w.])[0-9.]+ s\b", "… s", line)


def test_the_readme_is_an_entry_point_not_a_manual() -> None:
    assert len(README.splitlines()) <= MOST_LINES
    assert not re.search(r"\bissue \d+", README, re.IGNORECASE)


def test_the_readme_shows_what_a_first_run_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "build"
    monkeypatch.chdir(tmp_path)
    run = cli("refresh", "--source", NEWEST, "--out", out)
    assert run.returncode == 0, run.stderr
    printed = [_without_timings(line.replace(f"{out}/", "build/").replace(str(NEWEST), "../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788"))
               for line in run.stderr.splitlines()]
    shown = [_without_timings(line) for line in _printed_block() if not line.startswith("  ...")]
    missing = [line for line in shown if line not in printed]
    assert missing == [], f"README shows lines a first run does not print: {missing}\nit printed:\n{run.stderr}"
