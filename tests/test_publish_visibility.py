"""Every client sees a new publish when configured as docs/querying.md ("Seeing a new publish") says: a
reader opens the published build, the database is published again, and the reader's next query answers
from the second build (or, where the docs say a setting keeps the old build, still from the first)."""

import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest
from conftest import PROJECT, cli
from test_clients import ENGINES

from pipeline.paths import Paths
from pipeline.settings import ITL_DEADLINE_MS

CHECK = PROJECT / "tests" / "visibility_check.py"
SUPERSET_STACK = PROJECT / ".engines" / "superset-stack" / "bin" / "python"


def _makefile(name: str) -> str:
    """A version the Makefile installs an environment at."""
    found = re.search(rf"^{name} := (.+)$", (PROJECT / "Makefile").read_text(), re.MULTILINE)
    return found.group(1) if found else ""


SUPERSET_VERSION = _makefile("SUPERSET_VERSION")
SUPERSET = PROJECT / ".engines" / f"superset-{SUPERSET_VERSION}" / "bin" / "python"
SUPERSET_CHECK = PROJECT / "tests" / "superset_check.py"
DUCKDB_CLI = PROJECT / ".engines" / f"duckdb-cli-{_makefile('DUCKDB_CLI_VERSION')}" / "bin" / "duckdb"
# The two builds' itl_deadline_ms, which the readers report: the shared build's (the default) and another.
FIRST, SECOND = ITL_DEADLINE_MS.default, 300.0
DUCKDB_MODES = ("duckdb-reconnect", "duckdb-resolved")
SQLALCHEMY_MODES = ("pool-default", "pool-null", "pool-null-busy", "pool-null-resolved", "pool-null-event",
                    "pool-recycle")


def sees_the_second_build(mode: str, duckdb_version: str) -> bool:
    """What the docs promise: DuckDB before 1.5 hands a new connection to a path the database another open
    connection of the process already has; a pool keeps its connections on the first build."""
    keeps_open_database = tuple(map(int, duckdb_version.split(".")[:2])) < (1, 5)
    if mode == "pool-default":
        return False
    if mode in ("duckdb-reconnect", "pool-null-busy"):
        return not keeps_open_database
    return True


def _environments() -> list[tuple[str, Path, tuple[str, ...]]]:
    engines = [(f"duckdb-{v}", PROJECT / ".engines" / f"duckdb-{v}" / "bin" / "python", DUCKDB_MODES) for v in ENGINES]
    others = [*engines, ("superset-stack", SUPERSET_STACK, DUCKDB_MODES + SQLALCHEMY_MODES)]
    return [("project", Path(sys.executable), DUCKDB_MODES + SQLALCHEMY_MODES),
            *(pytest.param(*environment, id=environment[0], marks=pytest.mark.engines) for environment in others)]


def _first_build(newest_build: Paths, tmp_path: Path) -> Path:
    """An OUT whose published build is the first (a copy of the shared one, not built again)."""
    out = tmp_path / "out"
    shutil.copytree(newest_build.out, out, symlinks=True)
    return out


def _publish(out: Path, deadline: float) -> None:
    """The second build, published by this process: the readers are processes of their own."""
    built = cli("build", "--out", out, "--itl-deadline-ms", deadline)
    assert built.returncode == 0, built.stderr


def _ask(reader: subprocess.Popen[str], request: str = "query") -> dict:
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(f"{request}\n")
    reader.stdin.flush()
    line = reader.stdout.readline()
    assert line, reader.stderr.read() if reader.stderr else "the reader stopped"
    return json.loads(line)


@pytest.mark.parametrize(("name", "python", "modes"), _environments())
def test_a_reader_configured_as_documented_sees_the_second_publish(
        newest_build: Paths, tmp_path: Path, name: str, python: Path, modes: tuple[str, ...]) -> None:
    if not python.is_file():
        pytest.fail(f"{python} is missing: 'make test-all' installs it (make {python.parents[1]}/.installed)")
    out = _first_build(newest_build, tmp_path)
    database = str(out / "energy_index.duckdb")
    readers = {mode: subprocess.Popen([str(python), str(CHECK), mode, database], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for mode in modes}
    try:
        before = {mode: _ask(reader) for mode, reader in readers.items()}
        assert {mode: answer["itl_deadline_ms"] for mode, answer in before.items()} == dict.fromkeys(modes, FIRST)
        _publish(out, SECOND)
        after = {mode: _ask(reader, "wait" if mode == "pool-recycle" else "query") for mode, reader in readers.items()}
    finally:
        for reader in readers.values():
            reader.communicate(timeout=60)
    version = after[modes[0]]["duckdb"]
    if name.startswith("duckdb-"):
        assert version == name.removeprefix("duckdb-")
    expected = {mode: SECOND if sees_the_second_build(mode, version) else FIRST for mode in modes}
    assert {mode: answer["itl_deadline_ms"] for mode, answer in after.items()} == expected, f"DuckDB {version}"
    if "pool-recycle" in after:  # at most pool_recycle (1 s) after the publish, and one query
        assert after["pool-recycle"]["seconds"] < 5


def _lines(stream: IO[str]) -> "queue.Queue[str]":
    """Each line a process prints, as it prints it, then "" when it stops: a test waits for the next
    one (with a deadline) instead of sleeping."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.engines
def test_an_open_duckdb_cli_session_sees_the_second_publish_after_open_readonly(
        newest_build: Paths, tmp_path: Path) -> None:
    """An interactive session of the DuckDB CLI, as docs/querying.md tells its user: the session keeps the
    build it opened, `.open --readonly` of the published name (or a new invocation) answers from the
    newest, and a `.open` without the option would reopen the file writable."""
    if not DUCKDB_CLI.is_file():
        pytest.fail(f"{DUCKDB_CLI} is missing: 'make test-all' installs it (make {DUCKDB_CLI.parents[1]}/.installed)")
    out = _first_build(newest_build, tmp_path)
    database = str(out / "energy_index.duckdb")
    # The deadline and whether the database the session is on is read-only, one CSV line per statement.
    query = ("select itl_deadline_ms, (select readonly from duckdb_databases() "
             "where database_name = current_database()) from build_parameters;\n")
    session = subprocess.Popen([str(DUCKDB_CLI), "-readonly", "-csv", "-noheader", database],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert session.stdin is not None and session.stdout is not None
    lines = _lines(session.stdout)

    def ask(statements: str) -> str:
        session.stdin.write(statements)
        session.stdin.flush()
        line = lines.get(timeout=60)
        assert line, "the DuckDB CLI stopped"
        return line.strip()

    try:
        assert ask(query) == f"{FIRST},true"
        _publish(out, SECOND)
        assert ask(query) == f"{FIRST},true", "an open session keeps the build it opened"
        assert ask(f".open --readonly {database}\n{query}") == f"{SECOND},true"
        assert ask(f".open {database}\n{query}") == f"{SECOND},false", "plain .open drops -readonly"
    finally:
        session.communicate(timeout=60)
    assert session.returncode == 0
    again = subprocess.run([str(DUCKDB_CLI), "-readonly", "-csv", "-noheader", database, "-c", query],
                           capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout.strip()) == (0, f"{SECOND},true"), again.stderr


def documented_superset_settings() -> tuple[str, dict]:
    """What docs/querying.md tells a Superset user to set: the superset_config.py block and the database's
    Engine Parameters."""
    text = (PROJECT / "docs" / "querying.md").read_text(encoding="utf-8")
    config = re.search(r"For Superset, in `superset_config.py`.*?\n```python\n(.*?)```", text, re.DOTALL)
    parameters = re.search(r"Engine\s+Parameters,?\s+`(\{.*?\})`", text, re.DOTALL)
    assert config is not None and parameters is not None, "docs/querying.md: no Superset settings found"
    return config.group(1), json.loads(parameters.group(1))


@pytest.mark.slow  # about 20 s, most of it Superset setting up its metadata database; and a heavy install
def test_superset_configured_as_documented_sees_the_second_publish(newest_build: Paths, tmp_path: Path) -> None:
    """Superset itself, its superset_config.py and database settings taken from docs/querying.md: SQL Lab
    and a chart's query see the second publish while Superset holds a connection to the first; without the
    documented mutator, Superset on DuckDB before 1.5 keeps answering from the first."""
    if not SUPERSET.is_file():
        pytest.fail(f"{SUPERSET} is missing: 'make test-all' installs it (make {SUPERSET.parents[1]}/.installed)")
    out = _first_build(newest_build, tmp_path)
    documented, engine_parameters = documented_superset_settings()
    config = tmp_path / "superset_config.py"
    # After the documented settings, what a Superset of its own needs: its metadata database, a key, and
    # no CSRF token for the test's API calls.
    metadata = f"sqlite:///{tmp_path / 'superset.db'}"
    config.write_text(f"{documented}\nSQLALCHEMY_DATABASE_URI = {metadata!r}\nSECRET_KEY = {secrets.token_hex(32)!r}\n"
                      "WTF_CSRF_ENABLED = False\n", encoding="utf-8")
    environment = {**os.environ, "SUPERSET_CONFIG_PATH": str(config), "SUPERSET_HOME": str(tmp_path / "home")}
    with (tmp_path / "superset.log").open("w") as log:
        superset = subprocess.Popen(
            [str(SUPERSET), str(SUPERSET_CHECK), str(out / "energy_index.duckdb"), json.dumps(engine_parameters)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=environment)
    assert superset.stdin is not None and superset.stdout is not None
    lines = _lines(superset.stdout)

    def ask() -> dict:
        superset.stdin.write("query\n")
        superset.stdin.flush()
        line = lines.get(timeout=300)
        if not line:
            pytest.fail((tmp_path / "superset.log").read_text()[-3000:])
        return json.loads(line)

    try:
        before = ask()
        _publish(out, SECOND)
        after = ask()
    finally:
        superset.communicate(timeout=60)
    assert superset.returncode == 0, (tmp_path / "superset.log").read_text()[-3000:]
    assert after["superset"] == SUPERSET_VERSION
    paths = ("sql_lab", "chart", "sql_lab_without_mutator", "chart_without_mutator")
    assert {path: before[path] for path in paths} == dict.fromkeys(paths, FIRST)
    stale = FIRST if not sees_the_second_build("pool-null-busy", after["duckdb"]) else SECOND
    assert {path: after[path] for path in paths} == {"sql_lab": SECOND, "chart": SECOND,
                                                     "sql_lab_without_mutator": stale,
                                                     "chart_without_mutator": stale}, f"DuckDB {after['duckdb']}"


def test_the_docs_give_the_settings_the_tests_run() -> None:
    text = (PROJECT / "docs" / "querying.md").read_text(encoding="utf-8")
    section = text.split("### Seeing a new publish", 1)[1].split("\n## ", 1)[0]
    for setting in ("NullPool", "os.path.realpath", "DB_CONNECTION_MUTATOR", "pool_recycle", "pool_pre_ping"):
        assert setting in section, setting
    mutator = re.search(r"def DB_CONNECTION_MUTATOR.*?return uri, params|def DB_CONNECTION_MUTATOR.*?return .*?params",
                        section, re.DOTALL)
    assert mutator is not None
    assert "os.path.realpath(uri.database)" in mutator.group(0)


def test_under_sqlalchemy_2_key_reflection_fails_as_documented_and_the_workaround_works(newest_build: Paths) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("duckdb_engine")
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(f"duckdb:///{newest_build.database}", connect_args={"read_only": True},
                                      poolclass=NullPool)
    if sqlalchemy.__version__.startswith("2.0."):
        with pytest.raises(sqlalchemy.exc.DBAPIError, match="REGCLASS does not exist"):
            sqlalchemy.Table("gpu_ratings", sqlalchemy.MetaData(), autoload_with=engine)
    columns = sqlalchemy.inspect(engine).get_columns("best_configurations")
    table = sqlalchemy.Table("best_configurations", sqlalchemy.MetaData(),
                             *(sqlalchemy.Column(c["name"], c["type"]) for c in columns))
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.select(table.c.model_id, table.c.wh_per_unit)).fetchall()
    import duckdb

    with duckdb.connect(str(newest_build.database), read_only=True) as direct:
        expected = sorted(direct.execute("select model_id, wh_per_unit from best_configurations").fetchall())
    assert sorted(rows) == expected and expected
