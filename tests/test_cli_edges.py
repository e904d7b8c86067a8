"""The edges of the path people take give right answers or one clear line: unknown identifiers in the
SQL macros (every engine), a closed pipe, Ctrl-C at any moment (also on a loaded machine), the bounds
of `energy-index sql`, and the hints of the CLI. Real processes throughout."""

import fcntl
import json
import os
import pty
import re
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import NEWEST, PROJECT, UPSTREAM, busy_loops, tree_digest

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))
ENGINES = re.search(r"^ENGINE_VERSIONS := (.+)$", (PROJECT / "Makefile").read_text(), re.MULTILINE).group(1).split()
INTERRUPTED = re.compile(r"energy-index: error: interrupted[^\n]*\n")


def cli(*args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300, **kwargs)


# ---- unknown identifiers in the table macros, in every supported engine ----

MACRO_CHECK = r"""
import json, sys
import duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
outcome = {}
for name, sql in json.loads(sys.argv[2]).items():
    try:
        outcome[name] = {"rows": len(connection.execute(sql).fetchall())}
    except duckdb.Error as error:
        outcome[name] = {"error": str(error).splitlines()[0]}
print(json.dumps({"version": duckdb.__version__, "outcome": outcome}))
"""

NEWEST_ID = NEWEST.name
MACRO_CALLS = {
    "index_diff, unknown older": f"select * from index_diff('2026-02-16', '{NEWEST_ID}')",
    "index_diff, both unknown": "select * from index_diff('a', 'b')",
    "configuration_diff, unknown newer": f"select * from configuration_diff('{NEWEST_ID}', '2026-02-16-788578')",
    "best_configurations_in, unknown": "select * from best_configurations_in('2026-02-1')",
    "energy_at_concurrency, unknown model": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8', 'H100', 100)",
    "energy_at_concurrency, unknown task": "select * from energy_at_concurrency('chat', 'Qwen/Qwen3-8B', 'H100', 100)",
    "energy_at_concurrency, unknown GPU": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8B', 'h100', 100)",
    # and the known ones still answer
    "best_configurations_in": f"select * from best_configurations_in('{NEWEST_ID}')",
    "best_configurations_in, every snapshot": "select * from best_configurations_in(null)",
    "index_diff, one snapshot against itself": f"select * from index_diff('{NEWEST_ID}', '{NEWEST_ID}')",
    "energy_at_concurrency": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8B', 'H100', 100)",
}
EXPECTED = {
    "index_diff, unknown older": {"error": f"Invalid Input Error: unknown snapshot '2026-02-16'; the nearest: {NEWEST_ID}"},
    "index_diff, both unknown": {"error": f"Invalid Input Error: unknown snapshot 'a'; the nearest: {NEWEST_ID}"},
    "configuration_diff, unknown newer": {
        "error": f"Invalid Input Error: unknown snapshot '2026-02-16-788578'; the nearest: {NEWEST_ID}"},
    "best_configurations_in, unknown": {"error": f"Invalid Input Error: unknown snapshot '2026-02-1'; the nearest: {NEWEST_ID}"},
    "energy_at_concurrency, unknown model": {
        "error": "Invalid Input Error: unknown model 'Qwen/Qwen3-8'; the nearest: Qwen/Qwen3-8B, Qwen/Qwen3-14B, Qwen/Qwen3-32B"},
    "energy_at_concurrency, unknown task": {
        "error": "Invalid Input Error: unknown task 'chat'; the nearest: image-chat, video-chat, lm-arena-chat"},
    "energy_at_concurrency, unknown GPU": {"error": "Invalid Input Error: unknown GPU 'h100'; the nearest: H100, B200"},
    "best_configurations_in": {"rows": 113},
    "best_configurations_in, every snapshot": {"rows": 113},
    "index_diff, one snapshot against itself": {"rows": 0},
}


@pytest.mark.parametrize("version", [*ENGINES, "project"])
def test_2_every_macro_refuses_an_unknown_identifier_naming_the_nearest(version: str, newest_build: Paths) -> None:
    python = Path(sys.executable) if version == "project" else PROJECT / ".engines" / f"duckdb-{version}" / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{python} is missing: make .engines/duckdb-{version}/.installed")
    run = subprocess.run([str(python), "-c", MACRO_CHECK, str(newest_build.database), json.dumps(MACRO_CALLS)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert version == "project" or result["version"] == version
    outcome = result["outcome"]
    for name, expected in EXPECTED.items():
        assert outcome[name] == expected, (result["version"], name)
    assert outcome["energy_at_concurrency"]["rows"] >= 1


def test_2_the_sql_command_shows_the_identifier_error_as_one_line(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out, f"select * from index_diff('2026-02-16', '{NEWEST_ID}')")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"energy-index: error: unknown snapshot '2026-02-16'; the nearest: {NEWEST_ID}\n"


# ---- a closed pipe is the end of the output ----

@pytest.mark.parametrize("command", [
    ["sql", "select * from range(1000000)"],
    ["sql", "--format", "jsonl", "select * from configurations"],
    ["estimate", "--task", "gpqa", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "100"],
    ["snapshots"],
], ids=["sql-csv", "sql-jsonl", "estimate", "snapshots"])
def test_7_a_reader_that_stops_reading_ends_the_output_quietly(command: list[str], newest_build: Paths) -> None:
    # The reader is gone before the command writes anything: its first write meets a closed pipe.
    process = subprocess.Popen([CLI, *command, "--out", str(newest_build.out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.communicate(timeout=120)[1]
    assert (process.returncode, stderr) == (0, "")


def test_7_sql_piped_into_head(newest_build: Paths) -> None:
    shell = f"set -o pipefail; {shlex.quote(CLI)} sql --out {shlex.quote(str(newest_build.out))} " \
            "'select * from range(1000000)' | head -1"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, '"range"\n', "")



@pytest.mark.parametrize("query", ["select 1 as one;", "select 1 as one ; -- the end", "select 1 as one /* ; */;"])
def test_7_a_query_ending_in_a_semicolon_reads_the_same_into_a_pipe_or_a_file(
    query: str, newest_build: Paths, tmp_path: Path
) -> None:
    piped = cli("sql", "--out", newest_build.out, query)
    target = tmp_path / "one.csv"
    written = cli("sql", "--out", newest_build.out, query, "--output", target)
    assert (piped.returncode, piped.stdout, written.returncode) == (0, '"one"\n1\n', 0), piped.stderr + written.stderr
    assert target.read_text() == "one\n1\n"


# ---- Ctrl-C at any moment is one line ----

def _has_mapped(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("load", ["idle", "loaded"])
def test_8_ctrl_c_while_the_command_imports_is_one_line(load: str, newest_build: Paths) -> None:
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
def test_8_ctrl_c_right_after_the_start_never_shows_a_traceback(load: str, newest_build: Paths) -> None:
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


# ---- energy-index sql: bounds ----

def test_10_a_query_past_its_time_limit_is_interrupted_with_one_line(newest_build: Paths) -> None:
    started = time.monotonic()
    result = cli("sql", "--out", newest_build.out, "--timeout", "1", "select count(*) from range(1000000000000)")
    assert result.returncode == 1
    assert result.stderr == ("energy-index: error: the query was stopped at its time limit of 1 s; "
                             "--timeout SECONDS allows more\n")
    assert time.monotonic() - started < 60


def test_10_a_query_past_its_memory_limit_is_stopped_with_one_line(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out, "--memory-limit", "100MB", "select list(range) from range(300000000)")
    assert result.returncode == 1
    assert result.stderr == ("energy-index: error: the query needs more memory than its limit of 100MB; "
                             "--memory-limit SIZE (e.g. 8GB) allows more\n")


def test_10_the_default_bounds_and_the_spill_folder_outside_out(newest_build: Paths) -> None:
    before = tree_digest(newest_build.out, "current")
    result = cli("sql", "--out", newest_build.out, "select current_setting('temp_directory') as spill,"
                 " current_setting('memory_limit') as memory, current_setting('max_temp_directory_size') as spill_cap")
    assert result.returncode == 0, result.stderr
    spill, memory, spill_cap = result.stdout.splitlines()[1].split(",")
    out = str(newest_build.out.resolve())
    assert spill.strip('"') and not spill.strip('"').startswith(out), spill
    assert memory == spill_cap and memory.strip('"').startswith("3.7 GiB"), memory  # 4GB
    assert tree_digest(newest_build.out, "current") == before


def test_10_output_inside_out_is_refused_and_elsewhere_written_whole(newest_build: Paths, tmp_path: Path) -> None:
    out = newest_build.out
    published = tree_digest(out, "energy_index.duckdb")
    for target in (out / "energy_index.duckdb", out / "result.csv", out / "current" / "x.csv"):
        result = cli("sql", "--out", out, "select 1 as one", "--output", target)
        assert result.returncode == 1
        assert result.stderr == (f"energy-index: error: --output {target} is inside {out}, the published build; "
                                 "write it elsewhere\n")
    assert tree_digest(out, "energy_index.duckdb") == published
    assert not (out / "result.csv").exists()
    target = tmp_path / "result.csv"
    assert cli("sql", "--out", out, "select 1 as one", "--output", target).returncode == 0
    assert target.read_text() == "one\n1\n" and [p.name for p in tmp_path.iterdir()] == ["result.csv"]


# ---- energy-index sql: DuckDB's hints and terminal tables ----

def test_12_duckdbs_hints_are_kept_on_the_one_line(newest_build: Paths) -> None:
    table = cli("sql", "--out", newest_build.out, "select * from best_configuration")
    assert table.returncode == 1
    assert table.stderr == ('energy-index: error: Catalog Error: Table with name best_configuration does not exist! '
                            'Did you mean "best_configurations"?\n')
    column = cli("sql", "--out", newest_build.out, "select modl_id from best_configurations")
    assert column.returncode == 1 and len(column.stderr.splitlines()) == 1
    assert 'not found in FROM clause! Candidate bindings: "model_id"' in column.stderr


def on_a_terminal(columns: int, *args: str | Path) -> tuple[int, str]:
    """Run the CLI with its standard output on a terminal `columns` wide; its exit code and output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    process = subprocess.Popen([CLI, *map(str, args)], stdout=follower, stderr=subprocess.DEVNULL,
                               env={**environment, "PAGER": "cat"})
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return process.wait(timeout=60), output.decode().replace("\r\n", "\n")


def test_12_a_wide_result_fits_the_terminal_with_rounded_numbers_and_a_pipe_gets_full_precision(
    newest_build: Paths,
) -> None:
    query = "select * from best_configurations order by row_id limit 5"
    code, text = on_a_terminal(80, "sql", "--out", newest_build.out, query)
    assert code == 0
    lines = text.strip("\n").splitlines()
    # Too wide for a table: one field per line, every column (tests/test_sql_terminal.py).
    assert lines[0].startswith("-[ record 1 of 5 ]") and max(len(line) for line in lines) <= 80, text
    narrow = cli("sql", "--out", newest_build.out, "select wh_per_unit from best_configurations order by row_id limit 1")
    full = narrow.stdout.splitlines()[1]
    assert len(full.replace(".", "")) > 8, "the piped CSV keeps every digit"
    code, text = on_a_terminal(80, "sql", "--out", newest_build.out,
                               "select wh_per_unit from best_configurations order by row_id limit 1")
    assert code == 0 and f"{float(full):.4g}" in text and full not in text


# ---- hints: the command as it runs, --out, did you mean, no stray folders ----

def test_15_hints_print_the_command_as_it_runs_here_and_honour_out(tmp_path: Path) -> None:
    empty = tmp_path / "empty dir"
    without_venv = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = cli("snapshots", "--out", empty, cwd=PROJECT, env=without_venv)
    assert result.returncode == 1
    quoted = shlex.quote(str(empty))
    assert (f"run 'make OUT={quoted}' (or '.venv/bin/energy-index refresh --source FOLDER_OR_URL --out {quoted}')"
            in result.stderr), result.stderr
    with_venv = {**os.environ, "PATH": f"{Path(CLI).parent}:/usr/bin:/bin"}
    on_path = cli("snapshots", "--out", empty, cwd=PROJECT, env=with_venv)
    assert f"(or 'energy-index refresh --source FOLDER_OR_URL --out {quoted}')" in on_path.stderr
    default = cli("snapshots", cwd=tmp_path, env=without_venv)
    assert f"run 'make' (or '{CLI} refresh --source FOLDER_OR_URL')" in default.stderr
    assert not empty.exists() and not (tmp_path / "build").exists()


def test_15_the_audit_summarys_command_runs_as_printed(newest_build: Paths) -> None:
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


def test_15_sql_without_a_query_says_what_to_give(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out)
    assert result.returncode == 1
    assert "give the query to run, e.g. " in result.stderr and "or --file FILE holding it" in result.stderr
    assert "not both" not in result.stderr
    example = result.stderr.split('"')[1]
    assert cli("sql", "--out", newest_build.out, example).returncode == 0


def test_15_did_you_mean_for_snapshot_ids_and_source_folders(newest_build: Paths, tmp_path: Path) -> None:
    diff = cli("diff", "2026-02-16", "2026-02-1", "--out", newest_build.out)
    assert diff.returncode == 1
    assert "snapshot 2026-02-16 is not in" in diff.stderr and f"did you mean {NEWEST_ID}?" in diff.stderr
    source = cli("refresh", "--source", UPSTREAM / "2026-02-16", "--out", tmp_path / "out")
    assert source.returncode == 2
    assert f"no such folder; did you mean '{NEWEST}'?" in source.stderr
    assert not (tmp_path / "out").exists()


def test_15_a_mistyped_out_leaves_no_folder_behind(tmp_path: Path) -> None:
    for command in (["build"], ["report"]):
        result = cli(*command, "--out", tmp_path / "typo" / "deeper")
        assert result.returncode == 1, command
        assert list(tmp_path.iterdir()) == [], command


def test_15_diff_at_80_columns_never_cuts_two_identifiers_to_one_text(history_build: Paths) -> None:
    from pipeline.diff import format_text, snapshot_diff

    diff = snapshot_diff(history_build, "2025-11-30-9fa07d1", "2026-02-16-7885788")
    text = format_text(diff, 20, width=80)
    sections = text.split("\n\n")
    index = next(s for s in sections if s.startswith("Index rows")).splitlines()[3:]
    added = next(s for s in sections if s.startswith("Configurations added")).splitlines()[3:]
    shown_models = [re.split(r"\s{2,}", line.strip())[5] for line in index]
    models = [row["model_id"] for row in diff["index_changes"][:len(index)]]
    assert len(set(shown_models)) == len(set(models)) == len(set(zip(shown_models, models))) == 11
    shown = [tuple(re.split(r"\s{2,}", line.strip())[2:4]) for line in added]
    changes = [c for c in diff["configuration_changes"] if c["change"] in ("added", "removed")][:len(added)]
    full = [(c["model_id"], c["configuration"], c["repeat"]) for c in changes]
    assert len(set(shown)) == len(set(full)) == len(set(zip(shown, full))) == 20
    fields = next(s for s in sections if s.startswith("Fields changed")).splitlines()[1:]
    assert max(len(line) for line in added + fields) <= 80
