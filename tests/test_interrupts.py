"""A reader that stops reading ends the output quietly, and Ctrl-C at any moment (also on a loaded machine) is
one line, exit 1, with the published build intact. Real processes: the signal and the pipe are the subject."""

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BUILD_OUTPUTS, CLI, SERVED_COMMIT, FaultyHandler, busy_loops, copy_build, tree_digest

from pipeline.paths import Paths

INTERRUPTED = re.compile(r"energy-index: error: interrupted[^\n]*\n")


@pytest.mark.parametrize("command", [
    ["sql", "select * from range(1000000)"],
    ["sql", "--format", "jsonl", "select * from configurations"],
    ["estimate", "--task", "gpqa", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "100"],
    ["snapshots"],
], ids=["sql-csv", "sql-jsonl", "estimate", "snapshots"])
def test_a_reader_that_stops_reading_ends_the_output_quietly(command: list[str], newest_build: Paths) -> None:
    # The reader is gone before the command writes anything: its first write meets a closed pipe.
    process = subprocess.Popen([CLI, *command, "--out", str(newest_build.out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.communicate(timeout=120)[1]
    assert (process.returncode, stderr) == (0, "")


def _has_mapped(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("load", ["idle", "loaded"])
def test_ctrl_c_while_the_command_imports_is_one_line(load: str, newest_build: Paths) -> None:
    with busy_loops(load):
        process = subprocess.Popen([CLI, "snapshots", "--out", str(newest_build.out)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        # Ready: the process is loading DuckDB's library, in the middle of importing the command's modules.
        # Waiting on the process itself: the loop ends at once should it exit first.
        deadline = time.monotonic() + 60
        while not _has_mapped(process.pid, "duckdb") and time.monotonic() < deadline:
            try:
                process.wait(timeout=0.001)
                break
            except subprocess.TimeoutExpired:
                pass
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr
    assert process.returncode == 1 and INTERRUPTED.fullmatch(stderr), stderr
    assert stdout == ""


@pytest.mark.parametrize("load", ["idle", "loaded"])
def test_ctrl_c_right_after_the_start_never_shows_a_traceback(load: str, newest_build: Paths) -> None:
    for _ in range(3):
        with busy_loops(load):
            process = subprocess.Popen([CLI, "snapshots", "--out", str(newest_build.out)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=60)
        # Before Python has taken over the signal the process just ends, silently, as any program does;
        # after, it is the one line.
        assert (process.returncode, stderr) == (-signal.SIGINT, "") or (
            process.returncode == 1 and INTERRUPTED.fullmatch(stderr)), stderr
        assert stdout == ""


@pytest.mark.parametrize("load", ["idle", "loaded"])
def test_ctrl_c_is_one_line_exit_1_and_the_publish_intact(server, tmp_path: Path, load: str, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    base, _ = server
    url = f"{base}/{SERVED_COMMIT}/public/data"
    published = tree_digest(out, *BUILD_OUTPUTS)
    FaultyHandler.trickling.add(f"/{SERVED_COMMIT}/public/data/index.json")
    with busy_loops(load):
        process = subprocess.Popen([CLI, "refresh", "--source", url, "--out", str(out)],
                                   stderr=subprocess.PIPE, text=True)
        # Ready when the fetch says it is reading the (trickling) source: the refresh is under way.
        first = process.stderr.readline()
        assert first.startswith("fetch: reading "), first
        process.send_signal(signal.SIGINT)
        stderr = first + process.communicate(timeout=60)[1]
    assert process.returncode == 1
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"energy-index: error: interrupted; the last published build in {out} is unchanged"
    )
    assert tree_digest(out, *BUILD_OUTPUTS) == published
