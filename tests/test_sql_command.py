"""energy-index sql: one-line errors with DuckDB's hints, queries into a pipe or a file, its time and memory
bounds, its spill folder, and tables that fit the terminal."""

import fcntl
import os
import pty
import shlex
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
from conftest import CLI, NEWEST, cli, tree_digest

from pipeline.paths import Paths

NEWEST_ID = NEWEST.name


def test_the_sql_command_shows_the_identifier_error_as_one_line(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out, f"select * from index_diff('2026-02-16', '{NEWEST_ID}')")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"energy-index: error: unknown snapshot '2026-02-16'; the nearest: {NEWEST_ID}\n"


def test_sql_piped_into_head(newest_build: Paths) -> None:
    shell = f"set -o pipefail; {shlex.quote(CLI)} sql --out {shlex.quote(str(newest_build.out))} " \
            "'select * from range(1000000)' | head -1"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, '"range"\n', "")


@pytest.mark.parametrize("query", ["select 1 as one;", "select 1 as one ; -- the end", "select 1 as one /* ; */;"])
def test_a_query_ending_in_a_semicolon_reads_the_same_into_a_pipe_or_a_file(
    query: str, newest_build: Paths, tmp_path: Path
) -> None:
    piped = cli("sql", "--out", newest_build.out, query)
    target = tmp_path / "one.csv"
    written = cli("sql", "--out", newest_build.out, query, "--output", target)
    assert (piped.returncode, piped.stdout, written.returncode) == (0, '"one"\n1\n', 0), piped.stderr + written.stderr
    assert target.read_text() == "one\n1\n"


def test_a_query_past_its_time_limit_is_interrupted_with_one_line(newest_build: Paths) -> None:
    started = time.monotonic()
    result = cli("sql", "--out", newest_build.out, "--timeout", "1", "select count(*) from range(1000000000000)")
    assert result.returncode == 1
    assert result.stderr == ("energy-index: error: the query was stopped at its time limit of 1 s; "
                             "--timeout SECONDS allows more\n")
    assert time.monotonic() - started < 60


def test_a_query_past_its_memory_limit_is_stopped_with_one_line(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out, "--memory-limit", "100MB", "select list(range) from range(300000000)")
    assert result.returncode == 1
    assert result.stderr == ("energy-index: error: the query needs more memory than its limit of 100MB; "
                             "--memory-limit SIZE (e.g. 8GB) allows more\n")


def test_the_default_bounds_and_the_spill_folder_outside_out(newest_build: Paths) -> None:
    before = tree_digest(newest_build.out, "current")
    result = cli("sql", "--out", newest_build.out, "select current_setting('temp_directory') as spill,"
                 " current_setting('memory_limit') as memory, current_setting('max_temp_directory_size') as spill_cap")
    assert result.returncode == 0, result.stderr
    spill, memory, spill_cap = result.stdout.splitlines()[1].split(",")
    out = str(newest_build.out.resolve())
    assert spill.strip('"') and not spill.strip('"').startswith(out), spill
    assert memory == spill_cap and memory.strip('"').startswith("3.7 GiB"), memory  # 4GB
    assert tree_digest(newest_build.out, "current") == before


def test_output_inside_out_is_refused_and_elsewhere_written_whole(newest_build: Paths, tmp_path: Path) -> None:
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


def test_duckdbs_hints_are_kept_on_the_one_line(newest_build: Paths) -> None:
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


def test_a_wide_result_fits_the_terminal_with_rounded_numbers_and_a_pipe_gets_full_precision(
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


def test_sql_without_a_query_says_what_to_give(newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out)
    assert result.returncode == 1
    assert "give the query to run, e.g. " in result.stderr and "or --file FILE holding it" in result.stderr
    assert "not both" not in result.stderr
    example = result.stderr.split('"')[1]
    assert cli("sql", "--out", newest_build.out, example).returncode == 0
