"""Every client sees a new publish when configured as docs/querying.md ("Seeing a new publish") says: a
reader opens the published build, the database is published again, and the reader's next query answers
from the second build (or, where the docs say a setting keeps the old build, still from the first)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT
from test_clients import ENGINES

from pipeline.paths import Paths

CLI = str(Path(sys.executable).with_name("energy-index"))
CHECK = PROJECT / "tests" / "visibility_check.py"
SUPERSET_STACK = PROJECT / ".engines" / "superset-stack" / "bin" / "python"
FIRST, SECOND = 400.0, 300.0  # the two builds' itl_deadline_ms, which the readers report
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
    return [("project", Path(sys.executable), DUCKDB_MODES + SQLALCHEMY_MODES), *engines,
            ("superset-stack", SUPERSET_STACK, DUCKDB_MODES + SQLALCHEMY_MODES)]


def _publish(out: Path, deadline: float) -> None:
    built = subprocess.run([CLI, "build", "--out", str(out), "--itl-deadline-ms", str(deadline)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr


def _ask(reader: subprocess.Popen[str], request: str = "query") -> dict:
    import json

    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(f"{request}\n")
    reader.stdin.flush()
    line = reader.stdout.readline()
    assert line, reader.stderr.read() if reader.stderr else "the reader stopped"
    return json.loads(line)


@pytest.mark.parametrize(("name", "python", "modes"), _environments(), ids=[e[0] for e in _environments()])
def test_a_reader_configured_as_documented_sees_the_second_publish(
        newest_build: Paths, tmp_path: Path, name: str, python: Path, modes: tuple[str, ...]) -> None:
    if not python.is_file():
        pytest.fail(f"{python} is missing: 'make test' installs it (make {python.parents[1]}/.installed)")
    out = tmp_path / "out"
    shutil.copytree(newest_build.out, out, symlinks=True)
    _publish(out, FIRST)
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
    if "pool-recycle" in after:  # within pool_recycle (1 s) and the next query's checkout
        assert after["pool-recycle"]["seconds"] < 5


def test_a_new_process_sees_the_second_publish_as_the_duckdb_cli_does(newest_build: Paths, tmp_path: Path) -> None:
    """The DuckDB CLI opens the file anew in each process: no instance of the first build can be kept."""
    out = tmp_path / "out"
    shutil.copytree(newest_build.out, out, symlinks=True)
    command = [sys.executable, "-c", "import duckdb, sys; print(duckdb.connect(sys.argv[1], read_only=True)"
               ".execute('select itl_deadline_ms from build_parameters').fetchall()[0][0])",
               str(out / "energy_index.duckdb")]
    if (cli := shutil.which("duckdb")) is not None:
        command = [cli, "-readonly", "-csv", "-noheader", str(out / "energy_index.duckdb"),
                   "-c", "select itl_deadline_ms from build_parameters"]
    for deadline in (FIRST, SECOND):
        _publish(out, deadline)
        read = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert read.returncode == 0, read.stderr
        assert float(read.stdout.strip()) == deadline


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
