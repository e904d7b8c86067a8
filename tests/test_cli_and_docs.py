"""The CLI explains itself, rejects bad options clearly, and the documentation describes what exists."""

import re

import click
import duckdb
import pytest
from conftest import NEWEST, PROJECT, SEED_AS_OF, SEED_RETRIEVED, not_while_written

from pipeline.cli import all_commands, main
from pipeline.paths import Paths

COMMANDS = all_commands()
CLI_REFERENCE = (PROJECT / "docs" / "cli.md").read_text(encoding="utf-8")
DATABASE_REFERENCE = (PROJECT / "docs" / "querying.md").read_text(encoding="utf-8")


def test_the_cli_lists_the_commands_it_has() -> None:
    assert {"fetch", "ingest", "build", "export", "refresh", "history", "diff", "synth", "sql", "estimate",
            "plan"} <= set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_for_every_option_and_is_documented(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert COMMANDS[command].short_help and "examples:" in text
    for parameter in COMMANDS[command].params:
        if isinstance(parameter, click.Option):
            assert parameter.help, f"{command} {parameter.opts} has no help"
        assert (parameter.opts[-1] if isinstance(parameter, click.Option) else parameter.metavar) in text
    assert f"## `energy-index {command}`" in CLI_REFERENCE
    assert f"| `energy-index {command}` |" in CLI_REFERENCE, "and in the table of commands"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["build", "--itl-deadline-ms", "-5"], "must be a positive number, got '-5'"),
        (["build", "--itl-deadline-ms", "nan"], "must be a positive number, got 'nan'"),
        (["fetch", "--timeout", "soon"], "not a number: 'soon'"),
        (["refresh", "--bogus"], "No such option '--bogus'"),
        (["refersh"], "No such command 'refersh'. Did you mean 'refresh'?"),
    ],
)
def test_bad_options_are_rejected_with_a_clear_message(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_steps_out_of_order_say_what_to_run_first(tmp_path, run_cli) -> None:
    result = run_cli("ingest", "--out", tmp_path)
    assert result.exit_code == 1
    assert f"no snapshot has been fetched yet; run 'make OUT={tmp_path}'" in result.stderr
    exported = run_cli("export", "--out", tmp_path)
    assert exported.exit_code == 1
    assert f"no database has been built there yet; run 'make OUT={tmp_path}'" in exported.stderr
    assert ".generations" not in exported.stderr


def test_the_list_of_objects_is_generated_and_names_every_object_of_the_database(newest_build: Paths) -> None:
    from pipeline import docs

    assert docs.stale(docs.DOCS / "querying.md") == "", "docs/querying.md's list of objects is stale: run 'make docs'"
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        tables = {row[0] for row in connection.execute("select table_name from duckdb_tables()").fetchall()}
        views = {row[0] for row in connection.execute("select view_name from duckdb_views() where not internal").fetchall()}
        macros = {row[0] for row in connection.execute("select function_name from duckdb_functions()"
                                                       " where function_type in ('macro', 'table_macro')"
                                                       " and not internal").fetchall()}
    documented = dict(re.findall(r"^\| `(\w+)` \| ((?:table )?macro|table|view)\b", DATABASE_REFERENCE, re.MULTILINE))
    kinds = {"table": "table", "view": "view", "macro": "macro", "table macro": "macro"}
    assert {name: kinds[kind] for name, kind in documented.items()} == {
        **{t: "table" for t in tables}, **{v: "view" for v in views}, **{m: "macro" for m in macros}}


def test_every_table_view_and_column_is_described(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        undescribed_objects = connection.execute(
            "select view_name from duckdb_views() where not internal and comment is null"
            " union all select table_name from duckdb_tables() where not internal and comment is null"
        ).fetchall()
        undescribed_columns = connection.execute(
            "select table_name, column_name from duckdb_columns() where not internal and comment is null"
        ).fetchall()
    assert undescribed_objects == []
    assert undescribed_columns == []


def test_the_cli_reference_is_generated_from_the_parser() -> None:
    from pipeline import docs

    assert docs.stale(docs.DOCS / "cli.md") == "", "docs/cli.md is stale: run 'make docs'"


def test_the_index_files_fields_and_decimals_are_generated_from_the_dictionary() -> None:
    from pipeline import docs

    page = (docs.DOCS / "index-files.md").read_text(encoding="utf-8")
    assert docs.stale(docs.DOCS / "index-files.md") == "", "docs/index-files.md's field list is stale: run 'make docs'"
    assert "`wh_per_million_output_tokens` (2)" in page and "`wh_per_{unit}` (4)" in page


HEAVY = {"duckdb", "pyarrow", "pandas", "pandera", "numpy", "polars", "altair", "sqlglot", "tqdm"}
IMPORTS = """
import sys
sys.argv = ["energy-index", *sys.argv[1:]]
from pipeline.__main__ import main
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print(sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY)), file=sys.stderr)
"""


@pytest.mark.parametrize(("argv", "allowed"), [
    (["--version"], set()),
    (["--help"], set()),
    (["sql", "--help"], set()),
    # Its query's forked child imports DuckDB, not this process (pipeline/bounded_sql.py).
    (["sql", "select 1"], set()),
    (["estimate", "--task", "gpqa", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "100"], {"duckdb"}),
    (["plan", "--task", "gpqa", "--model", "Qwen/Qwen3-8B", "--tokens-per-day", "1e9", "--p90-itl-ms", "100"],
     {"duckdb"}),
    # The build's own arguments again: a refresh with nothing to do.
    (["refresh", "--source", str(NEWEST), "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED], set()),
])
def test_a_command_imports_only_what_it_uses(argv: list[str], allowed: set[str], newest_build: Paths) -> None:
    import subprocess
    import sys

    with not_while_written(newest_build):  # a refresh takes OUT's lock
        run = subprocess.run([sys.executable, "-c", IMPORTS.replace("HEAVY", repr(HEAVY)), *argv,
                              *(["--out", str(newest_build.out)] if argv[0] in ("sql", "estimate", "plan", "refresh") else [])],
                             capture_output=True, text=True, timeout=120)
    assert run.stdout or "; nothing to do\n" in run.stderr, run.stderr
    assert set(eval(run.stderr.splitlines()[-1])) == allowed, run.stderr


def test_make_reads_every_default_from_the_settings() -> None:
    import subprocess

    from pipeline import settings

    shown = subprocess.run(["make", "-s", "-C", str(PROJECT), "help"], capture_output=True, text=True,
                           timeout=60, env={"PATH": "/usr/bin:/bin"}).stdout
    for setting in settings.SETTINGS:
        if setting.make:
            assert f"  {setting.make:<16} {settings.described(setting)}\n" in shown, setting.name
    assert f"  OUT              {settings.DEFAULT_OUT}\n" in shown.split("Variables of this Makefile")[1]


@pytest.mark.parametrize("entry, wrong, message", [
    ("[fields.num_gpus]\n", "[fields.num_gpus]\ngee = 1\n", "[fields.num_gpus]: Object contains unknown field `gee`"),
    ('[fields.num_gpus]\ntype = "int64"', '[fields.num_gpus]\ntype = "int46"', "[fields.num_gpus] type: 'int46' is none of"),
    ('nickname = { upstream = "required" }', 'nickname = { upstream = "requird" }',
     "[tables.models]: Invalid enum value 'requird' - at `$.columns[...].upstream`"),
])
def test_a_misspelt_dictionary_entry_is_an_error_naming_it(tmp_path, monkeypatch, entry: str, wrong: str,
                                                           message: str) -> None:
    from schemas import dictionary

    misspelt = tmp_path / "dictionary.toml"
    misspelt.write_text(dictionary.DICTIONARY.read_text(encoding="utf-8").replace(entry, wrong, 1), encoding="utf-8")
    monkeypatch.setattr(dictionary, "DICTIONARY", misspelt)
    dictionary.entries.cache_clear()
    try:
        with pytest.raises(ValueError) as error:
            dictionary.entries()
        assert str(error.value).startswith(f"{misspelt}: {message}")
    finally:
        monkeypatch.undo()
        dictionary.entries.cache_clear()


def test_every_count_the_docs_state_is_the_builds(history_build: Paths) -> None:
    from pipeline.sql_objects import view_files
    from schemas import TABLE_NAMES

    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        tables = connection.execute("select count(*) from duckdb_tables() where not internal").fetchone()[0]
        views = connection.execute("select count(*) from duckdb_views() where not internal").fetchone()[0]
    truth = {"views and macros": len(view_files()), "tables": tables, "views": views, "ingested tables": len(TABLE_NAMES)}
    stated = []
    for path in [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        stated += [(path.name, "views and macros", int(n)) for n in re.findall(r"\b(\d+) views and macros", text)]
        for n_tables, n_views in re.findall(r"\b(\d+) tables and (\d+) views", text):
            stated += [(path.name, "tables", int(n_tables)), (path.name, "views", int(n_views))]
        stated += [(path.name, "ingested tables", int(n)) for n in re.findall(r"rows in (\d+) tables", text)]
    assert stated, "no counts found"
    wrong = [f"{name}: {count} {what}, the build has {truth[what]}" for name, what, count in stated if count != truth[what]]
    assert wrong == []


def test_the_estimate_the_querying_page_shows_is_what_the_command_prints(newest_build: Paths, capsys) -> None:
    page = (PROJECT / "docs" / "querying.md").read_text(encoding="utf-8")
    command, printed = re.search(r"```sh\n\.venv/bin/energy-index (estimate [^\n]*)\n```\n\nprints\n\n```\n(.*?)```",
                                 page, re.S).groups()
    assert main([*command.split(), "--out", str(newest_build.out)]) == 0
    assert capsys.readouterr().out == printed



def test_an_estimate_beyond_every_measured_point_says_so_in_words(newest_build: Paths, capsys) -> None:
    assert main(["estimate", "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--gpu", "H100",
                 "--concurrency", "100000", "--out", str(newest_build.out)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "  outside the measured range of the one deployment measured; no estimate"
