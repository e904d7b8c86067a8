"""The audit summary a refresh prints: what each number is, every snapshot after a history, and a command that runs as printed."""

import os
import shlex
import subprocess
import sys

from conftest import PROJECT, cli

from pipeline.paths import Paths


def test_the_audit_summary_says_what_each_number_is_and_covers_every_snapshot_after_history(
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


def test_the_audit_summarys_command_runs_as_printed(newest_build: Paths) -> None:
    without_venv = {**os.environ, "PATH": "/usr/bin:/bin"}
    summary = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from pipeline.audit import audit_summary;"
         " from pipeline.paths import Paths; print(audit_summary(Paths(Path(sys.argv[1]))))", str(newest_build.out)],
        cwd=PROJECT, env=without_venv, capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    command = next(line.strip() for line in summary.stdout.splitlines() if " sql --out " in line)
    assert command.startswith(".venv/bin/energy-index sql --out ")
    rows = subprocess.run(shlex.split(command), cwd=PROJECT, env=without_venv, capture_output=True, text=True,
                          timeout=120)
    assert rows.returncode == 0 and rows.stdout.startswith('"snapshot_id"'), rows.stderr
