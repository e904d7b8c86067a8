"""sql on a terminal narrower than its result: one field per line, so that no column (the model and the GPU
that tell a row apart among them) is dropped without a word; a result that fits stays DuckDB's table."""

import re

import duckdb

from conftest import PROJECT
from test_sql_command import on_a_terminal

from pipeline.paths import Paths


def fragile_picks_query() -> str:
    """The docs' query of index rows decided by less than 2 % (docs/uncertainty.md), as written there."""
    text = (PROJECT / "docs" / "uncertainty.md").read_text(encoding="utf-8")
    block = re.search(r"```sql\n(-- Index rows whose choice was decided by less than 2 %\n.*?)```", text, re.S)
    assert block, "docs/uncertainty.md no longer holds the fragile-picks query"
    return block.group(1)


def test_the_docs_fragile_picks_query_at_80_columns_shows_every_column_of_every_row(newest_build: Paths) -> None:
    query = fragile_picks_query()
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        relation = connection.sql(query)
        columns, rows = relation.columns, relation.fetchall()
    assert len(columns) == 7 and rows
    code, text = on_a_terminal(80, "sql", "--out", newest_build.out, "--", query)  # it opens with a -- comment
    assert code == 0, text
    lines = text.strip("\n").splitlines()
    assert max(map(len, lines)) <= 80, text
    records = re.split(r"^-\[ record \d+ of \d+ \]-*$\n?", text, flags=re.M)[1:]
    assert len(records) == len(rows), text
    for record, row in zip(records, rows):
        fields = dict(re.findall(r"^(\S+)\s*\| (.*)$", record, re.M))
        assert list(fields) == columns, record
        # The row's identity, whole: task, model and GPU as the database holds them.
        assert [fields["task"], fields["model_id"], fields["gpu"]] == list(row[:3]), record


def test_a_result_that_fits_stays_a_table(newest_build: Paths) -> None:
    code, text = on_a_terminal(80, "sql", "--out", newest_build.out,
                               "select gpu, count(*) as n from best_configurations group by gpu order by gpu")
    assert code == 0 and text.lstrip("\n").startswith("┌") and "record" not in text, text
