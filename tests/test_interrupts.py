"""A reader that stops reading ends the output quietly, and Ctrl-C at any moment (also on a loaded machine) is
one line, exit 1, with the published build intact. Real processes: the signal and the pipe are the subject."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (BUILD_OUTPUTS, CLI, NEWEST, SERVED_COMMIT, UPSTREAM, FaultyHandler, busy_loops, cli,
                      copy_build, tree_digest)

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


# Runs the CLI as its command does (main() with no arguments: its own signal handling) with one function
# replaced by one that sends SIGNAL to the process on its nth call, before or after doing its work: the
# stop lands at a known point. With "query", the KeyboardInterrupt it raises there comes out as DuckDB
# reports one raised in a query it runs (a table load, the checkpoint): RuntimeError('Query interrupted').
STOPPER = """
import functools, importlib, os, signal, sys
target, attribute, when, nth, number, query = sys.argv[1:7]
module, _, cls = target.partition(":")
owner = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
original, calls = getattr(owner, attribute), []
def stop():
    try:
        os.kill(os.getpid(), int(number))
    except KeyboardInterrupt:
        if query == "query":
            raise RuntimeError("Query interrupted") from None
        raise
@functools.wraps(original)
def stopping(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(nth) and when == "before":
        stop()
    result = original(*args, **kwargs)
    if len(calls) == int(nth):
        stop()
    return result
setattr(owner, attribute, stopping)
from pipeline.cli import main
sys.argv = ["energy-index", *sys.argv[7:]]
sys.exit(main())
"""


def _interrupted(stop: signal.Signals, out: Path, published: bool = False) -> str:
    how = "interrupted" if stop == signal.SIGINT else f"interrupted by {stop.name}"
    what = (f"the new build was published in {out} before it stopped" if published
            else f"the last published build in {out} is unchanged")
    return f"energy-index: error: {how}; {what}"


TERM, INT = signal.SIGTERM, signal.SIGINT


@pytest.mark.parametrize(("target", "attribute", "when", "nth", "query", "published", "stop"), [
    pytest.param("pipeline.ingest:_TableWriters", "write", "after", 2, "", False, INT, id="ingest-SIGINT", marks=pytest.mark.sweep),
    pytest.param("pipeline.build", "_load_tables", "before", 1, "query", False, TERM, id="table-load-SIGTERM"),
    pytest.param("pipeline.build", "_load_tables", "before", 1, "query", False, INT, id="table-load-SIGINT", marks=pytest.mark.sweep),
    pytest.param("pipeline.build", "describe_objects", "after", 1, "query", False, TERM, id="checkpoint-SIGTERM", marks=pytest.mark.sweep),
    pytest.param("pipeline.jsontext", "dumps", "after", 20, "", False, INT, id="export-SIGINT", marks=pytest.mark.sweep),
    pytest.param("pipeline.publish", "_fsync_directory", "after", 1, "", False, TERM, id="before-switch-SIGTERM", marks=pytest.mark.sweep),
    pytest.param("pipeline.publish", "_fsync_directory", "after", 2, "", True, TERM, id="after-switch-SIGTERM"),
])
def test_a_stop_at_any_point_of_a_refresh_is_one_line_and_leaves_the_publish_whole(
        tmp_path: Path, plain_build: Paths, target: str, attribute: str, when: str, nth: int, query: str,
        published: bool, stop: signal.Signals) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    before = tree_digest(out, *BUILD_OUTPUTS)
    stopped = subprocess.run([sys.executable, "-c", STOPPER, target, attribute, when, str(nth), str(int(stop)), query,
                              "refresh", "--source", str(NEWEST), "--out", str(out), "--itl-deadline-ms", "250"],
                             capture_output=True, text=True, timeout=300)
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert stopped.returncode == 1
    assert [line for line in stopped.stderr.splitlines() if line.startswith("energy-index: ")] == [
        _interrupted(stop, out, published)]
    assert stopped.stderr.splitlines()[-1] == _interrupted(stop, out, published)
    assert (tree_digest(out, *BUILD_OUTPUTS) != before) == published
    assert [p.name for p in Paths(out).generations_dir.iterdir() if not p.name.isdigit()] == []
    again = cli("refresh", "--source", NEWEST, "--out", out, "--itl-deadline-ms", "250")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(("command", "line", "stop"), [
    pytest.param("refresh", "ingest: ", TERM, id="refresh-build"),  # the build under way
    pytest.param("refresh", "build: ", INT, id="refresh-export", marks=pytest.mark.sweep),  # the export under way
    pytest.param("history", "history: ingesting 3/", TERM, id="history-ingest"),
    pytest.param("history", "build: ", INT, id="history-export", marks=pytest.mark.sweep),
])
def test_a_stop_sent_as_a_step_says_its_line_is_one_line(tmp_path: Path, plain_build: Paths, command: str, line: str,
                                                         stop: signal.Signals) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    before = tree_digest(out, *BUILD_OUTPUTS)
    process = subprocess.Popen([CLI, command, "--source", str(NEWEST if command == "refresh" else UPSTREAM),
                                "--out", str(out), "--itl-deadline-ms", "250"], stderr=subprocess.PIPE, text=True)
    printed = []
    for said in process.stderr:  # ready: the step's line is out, the next step under way
        printed.append(said)
        if said.startswith(line):
            break
    process.send_signal(stop)
    stderr = "".join(printed) + process.communicate(timeout=300)[1]
    assert "Traceback" not in stderr, stderr
    published = tree_digest(out, *BUILD_OUTPUTS) != before  # the signal may come after the switch
    assert (process.returncode, stderr.splitlines()[-1]) == (1, _interrupted(stop, out, published)), stderr
    assert [said for said in stderr.splitlines() if said.startswith("energy-index: ")] == [stderr.splitlines()[-1]]
