"""The CLI explains itself, rejects bad options clearly, and the documentation describes what exists."""

import re

import duckdb
import pytest
from conftest import PROJECT, documentation_text

from pipeline.cli import main, make_parser
from pipeline.paths import Paths

COMMANDS = ["fetch", "ingest", "build", "export", "refresh", "history", "diff", "synth"]
CLI_REFERENCE = (PROJECT / "docs" / "cli.md").read_text(encoding="utf-8")
DATABASE_REFERENCE = (PROJECT / "docs" / "querying.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_for_every_option(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    subparsers = next(a for a in make_parser()._actions if a.dest == "command")
    for action in subparsers.choices[command]._actions:
        assert action.help, f"{command} {action.option_strings} has no help"
        assert (action.option_strings[-1] if action.option_strings else action.metavar) in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_documented(command: str) -> None:
    assert f"`energy-index {command}`" in CLI_REFERENCE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["build", "--itl-deadline-ms", "-5"], "must be a positive number, got '-5'"),
        (["build", "--itl-deadline-ms", "nan"], "must be a positive number, got 'nan'"),
        (["fetch", "--timeout", "soon"], "not a number: 'soon'"),
        (["refresh", "--bogus"], "unrecognized arguments: --bogus"),
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


def test_documented_data_model_matches_the_database(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        tables = {row[0] for row in connection.execute("select table_name from duckdb_tables()").fetchall()}
        views = {row[0] for row in connection.execute("select view_name from duckdb_views() where not internal").fetchall()}
    documented = dict(re.findall(r"^\| `(\w+)` \| (table|view) \|", DATABASE_REFERENCE, re.MULTILINE))
    assert documented == {**{t: "table" for t in tables}, **{v: "view" for v in views}}


def test_every_view_and_column_is_described(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        undescribed_views = connection.execute(
            "select view_name from duckdb_views() where not internal and comment is null"
        ).fetchall()
        undescribed_columns = connection.execute(
            """
            select c.table_name, c.column_name from duckdb_columns() as c
            join duckdb_views() as v on v.view_name = c.table_name
            where not v.internal and c.comment is null
            """
        ).fetchall()
    assert undescribed_views == []
    assert undescribed_columns == []


def test_the_cli_reference_is_generated_from_the_parser() -> None:
    from pipeline import docs

    assert docs.section(CLI_REFERENCE, docs.CLI_START, docs.CLI_END) == docs.render_cli(), (
        "docs/cli.md is stale: run 'make docs'"
    )


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
