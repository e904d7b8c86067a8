"""energy-index sql holds its bounds for any query: a single expensive call is stopped at the time limit
and held to the memory limit, a huge result and its spill are bounded, the spill goes on every exit (a
kill too), every value of --timeout and --memory-limit works or is a usage error, no statement type gives
a traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))
TIME_LIMIT_S = 2
MEMORY_LIMIT_MB = 500
# Runaway single calls: each ran far past --timeout 5 or far above --memory-limit 500MB when the time limit
# was a timer interrupting DuckDB and the memory limit DuckDB's own.
LIST_SORT = "select list_sort(range(100000000))[1]"
REPEAT = "select length(repeat('abc', 1000000000))"
# Each call rewrites 40 MB; twenty of them (each string a little longer, so the optimiser cannot fold
# them into one) take far more than the limit even on an idle machine, where one alone took 4 s.
REGEX = (r"select sum(length(regexp_replace(repeat('ab', 20000000 + i), '(a)(b)', '\2\1', 'g')))"
         r" from range(20) as t(i)")
SPILLING = "select sum(hash(k)) from (select range % 50000000 as k, count(*) from range(2000000000) group by k)"
STOPPED = (f"energy-index: error: the query was stopped at its time limit of {TIME_LIMIT_S} s; --timeout SECONDS allows "
           "more\n")
TOO_BIG = ("energy-index: error: the query needs more memory than its limit of 500MB; --memory-limit SIZE (e.g. "
           "8GB) allows more\n")


def sql(build: Paths, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "sql", "--out", str(build.out), *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


def timed_sql(build: Paths, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = sql(build, *args)
    return time.monotonic() - started, result


def peak_rss_mb(build: Paths, *args: str) -> tuple[float, int, str]:
    """The largest resident size of `energy-index sql` or any process it started, its exit status and stderr:
    measured in a process of its own, whose children are only those."""
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, r.returncode, repr(r.stderr))")
    printed = subprocess.run([sys.executable, "-c", measure, CLI, "sql", "--out", str(build.out), *args],
                             capture_output=True, text=True, timeout=120, check=True).stdout.split(" ", 2)
    return float(printed[0]), int(printed[1]), eval(printed[2])  # noqa: S307 (our own repr of a str)


@pytest.mark.parametrize("query", [LIST_SORT, pytest.param(REGEX, marks=pytest.mark.sweep)], ids=["list_sort", "regex"])
def test_a_single_expensive_call_is_stopped_within_2_s_of_its_time_limit(query: str, newest_build: Paths) -> None:
    start_up, quick = timed_sql(newest_build, "select 1")
    assert quick.returncode == 0, quick.stderr
    elapsed, result = timed_sql(newest_build, "--timeout", str(TIME_LIMIT_S), query)
    assert (result.returncode, result.stderr) == (1, STOPPED)
    assert elapsed - start_up < TIME_LIMIT_S + 2, elapsed


@pytest.mark.parametrize("query", [REPEAT, LIST_SORT], ids=["repeat", "list_sort"])
def test_a_single_expensive_call_stays_within_its_memory_limit(query: str, newest_build: Paths) -> None:
    interpreter, code, stderr = peak_rss_mb(newest_build, "select 1")
    assert code == 0, stderr
    peak, code, stderr = peak_rss_mb(newest_build, "--memory-limit", f"{MEMORY_LIMIT_MB}MB", "--timeout", "60", query)
    assert (code, stderr) == (1, TOO_BIG)
    assert peak <= MEMORY_LIMIT_MB + interpreter, (peak, interpreter)


def test_a_huge_result_is_bounded_by_the_limit(newest_build: Paths, tmp_path: Path) -> None:
    elapsed, result = timed_sql(newest_build, "--memory-limit", "100MB", "--timeout", "60",
                                "select * from range(10000000000)")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == ("energy-index: error: the query writes more than its limit of 100MB (its result or a "
                             "spill file); --memory-limit SIZE (e.g. 8GB) allows more\n")
    assert elapsed < 60


def _wait_for(condition: "callable", process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        try:
            process.wait(timeout=0.05)  # waits on the process: ends the loop at once should it exit
        except subprocess.TimeoutExpired:
            pass


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stopped_query_leaves_no_spill(stop: signal.Signals, newest_build: Paths, tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen([CLI, "sql", "--out", str(newest_build.out), "--memory-limit", "100MB", "--timeout",
                                "600", SPILLING], env={**os.environ, "TMPDIR": str(temporary)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: any(path.name.startswith("duckdb_temp") for path in temporary.rglob("*")), process)
        process.send_signal(stop)
        stderr = process.communicate(timeout=60)[1]
        # SIGKILL leaves the command no time; its query's process sees it gone and removes the folder.
        _wait_for(lambda: not any(temporary.iterdir()), process)
    finally:
        process.kill()
        process.wait()
    if stop != signal.SIGKILL:
        how = "interrupted" if stop == signal.SIGINT else f"interrupted by {stop.name}"
        assert (process.returncode, stderr) == (1, f"energy-index: error: {how}; the last published build in "
                                                   f"{newest_build.out} is unchanged\n")


@pytest.mark.parametrize("value", ["1e-3", "86400"])
def test_every_timeout_works(value: str, newest_build: Paths) -> None:
    result = sql(newest_build, "--timeout", value, "select 42 as answer")
    if value == "1e-3":  # so short that even this is stopped: said as the time limit
        assert (result.returncode, result.stderr) in ((0, ""), (1, STOPPED.replace(f" {TIME_LIMIT_S} s", " 0.001 s")))
    else:
        assert (result.returncode, result.stdout, result.stderr) == (0, "\"answer\"\n42\n", "")


@pytest.mark.parametrize(("option", "value"), [
    ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "86400.5"),
    ("--timeout", "1e308"),
    ("--memory-limit", "0MB"), ("--memory-limit", "-5MB"), ("--memory-limit", "1B"),
    ("--memory-limit", "99999999999999999999TB"), ("--memory-limit", "lots"),
])
def test_every_other_value_is_a_usage_error(option: str, value: str, newest_build: Paths) -> None:
    result = cli("sql", "--out", newest_build.out, option, value, "select 1")  # refused before any query runs
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"energy-index: error: Invalid value for '{option}': "), result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("query", ["update extensions", "checkpoint", "vacuum", "set threads = 1", "pragma version",
                                   "load json", "detach database"])
def test_no_statement_type_gives_a_traceback(query: str, newest_build: Paths) -> None:
    result = sql(newest_build, query)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("energy-index: error: ") and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_memory_limit_still_lets_a_query_spill_and_finish(newest_build: Paths) -> None:
    result = sql(newest_build, "--memory-limit", "200MB", "select count(*) as groups from (select range % 5000000 as k,"
                 " count(*) from range(20000000) group by k)")
    assert (result.returncode, result.stdout, result.stderr) == (0, "\"groups\"\n5000000\n", "")


def _children(command: subprocess.Popen[str]) -> list[int]:
    try:
        return [int(pid) for pid in Path(f"/proc/{command.pid}/task/{command.pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _query_process(command: subprocess.Popen[str]) -> int:
    """The process `energy-index sql` runs its query in: its one child."""
    (child,) = _children(command)
    return child


def _state(pid: int) -> str:
    """Process `pid`'s state as /proc gives it (R, S, T stopped, Z zombie...), X when it has gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return "X"


def _spilling(build: Paths, temporary: Path) -> subprocess.Popen[str]:
    """`energy-index sql` of a spilling query in a session of its own, once it has spilled into `temporary`."""
    process = subprocess.Popen([CLI, "sql", "--out", str(build.out), "--memory-limit", "100MB", "--timeout", "600",
                                SPILLING], env={**os.environ, "TMPDIR": str(temporary)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    before = set(temporary.iterdir())
    _wait_for(lambda: any(path.name.startswith("duckdb_temp") for folder in set(temporary.iterdir()) - before
                          for path in folder.rglob("*")), process)
    return process


def test_after_a_query_killed_with_its_command_the_next_call_removes_its_spill(newest_build: Paths,
                                                                                tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    killed = _spilling(newest_build, temporary)
    query = _query_process(killed)
    # Both at once, as `timeout -s KILL`, a service manager or the OOM killer: stopped first, so that neither
    # sees the other end (and cleans up) in the moment between the two kills.
    os.killpg(killed.pid, signal.SIGSTOP)
    _wait_for(lambda: _state(killed.pid) == _state(query) == "T", killed)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=60)
    _wait_for(lambda: _state(query) in ("Z", "X"), killed)  # a zombie holds no files
    (left,) = temporary.iterdir()  # no process remains to remove it
    # A query that runs until it is stopped, its folder made (and locked) once it has started its query's process.
    running = subprocess.Popen([CLI, "sql", "--out", str(newest_build.out), "--timeout", "600",
                                "select sum(range) from range(1000000000000)"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "TMPDIR": str(temporary)})
    try:
        _wait_for(lambda: bool(_children(running)), running)
        later = sql(newest_build, "select 1 as one", env={**os.environ, "TMPDIR": str(temporary)})
        assert (later.returncode, later.stdout, later.stderr) == (0, '"one"\n1\n', "")
        assert not left.exists()
        assert len(list(temporary.iterdir())) == 1 and running.poll() is None  # a live call's folder is never taken
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.communicate(timeout=60)


def test_a_query_stopped_by_someone_elses_sigterm_is_said_as_such(newest_build: Paths, tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = _spilling(newest_build, temporary)
    try:
        os.kill(_query_process(process), signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert (process.returncode, stdout, stderr) == (1, "", "energy-index: error: the query's process was stopped by "
                                                   "SIGTERM from another process, before it answered; nothing was "
                                                   "written. Run it again\n")
    assert list(temporary.iterdir()) == []
