"""Every declared key holds on the eleven-snapshot history, as dbt and SQLMesh test a model's grain: each
table's key in the field dictionary and each view's and table macro's `-- key:` header line tell the
object's rows apart, and no key column is null unless declared so (a nullable column of the dictionary,
a `-- null in key:` header line). A table with an empty key has at most one row."""

import duckdb
import pytest

from pipeline.descriptions import declared_keys
from pipeline.paths import Paths, hive_key
from pipeline.sql_objects import Key, sql_object, view_files
from pipeline.stored_tables import FITTED, STORED

KEYS = declared_keys()
# The rows a table macro that is not stored is checked on: several calls, each's rows told apart by `call`
# (here one for each task of the index, on the model and GPU first in order); a new unstored table macro
# needs its calls here.
FIRST_PER_TASK = "(select task, min(model_id || '|' || gpu) as pair from best_configurations group by task) as first"
CALLS = {name: f"select first.task as call, e.* from {FIRST_PER_TASK}, lateral {name}(first.task, "
               "split_part(pair, '|', 1), split_part(pair, '|', 2), 8) as e"
         for name in ("energy_at_concurrency", "energy_at_concurrency_unchecked", "energy_from_fit")}
# Every model of each task planned at its family's first latency metric.
CALLS |= {name: ("select t.task as call, p.* from (select distinct c.task, m.latency_metric from configuration_points "
                 "as c join latency_metrics as m using (family) where m.metric_order in (1, 4)) as t, "
                 f"lateral {name}(t.task, null, 1e9, t.latency_metric, 100) as p")
          for name in ("fleet_plan", "fleet_plan_unchecked")}
# A fitted table stores what Python computes from its macro's rows, so the macro's own rows are called.
CALLS["efficiency_curve_points_in"] = "select 'every snapshot' as call, * from efficiency_curve_points_in(null)"
TABLE_MACROS = sorted(name for name in view_files() if sql_object(name).kind == "table macro")


@pytest.fixture(scope="module")
def connection(history_build: Paths) -> duckdb.DuckDBPyConnection:
    with duckdb.connect(str(history_build.database), read_only=True) as opened:
        yield opened


def violations(connection: duckdb.DuckDBPyConnection, rows: str, key: Key) -> tuple[int, int, dict[str, int]]:
    """How many rows `rows` (a query) has, how many key values more than one row shares, and each
    non-nullable key column's nulls."""
    grouped = f"group by {', '.join(key.columns)}" if key.columns else ""
    required = [column for column in key.columns if column not in key.nullable]
    nulls = ", ".join(f"count(*) filter (where {column} is null)" for column in required) or "0"
    count, shared, *null_counts = connection.execute(
        f"with objects as ({rows}) select (select count(*) from objects),"
        f" (select count(*) from (select 1 from objects {grouped} having count(*) > 1)), {nulls} from objects"
    ).fetchone()
    return count, shared, {column: n for column, n in zip(required, null_counts) if n}


@pytest.mark.parametrize("name", [name for name in KEYS if name not in TABLE_MACROS])
def test_the_declared_key_of_every_table_and_view_holds(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    count, shared, nulls = violations(connection, f"select * from {name}", KEYS[name])
    assert (shared, nulls) == (0, {}), f"{name}: {shared} key values shared by several rows, nulls: {nulls}"
    assert count > 0 or name in ("audit_findings", "configuration_changes", "index_changes"), f"{name} is empty"


@pytest.mark.parametrize("name", TABLE_MACROS)
def test_the_declared_key_of_every_table_macro_holds(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    stored = [table for table, (macro, _) in STORED.items() if macro == name and table not in FITTED]
    assert stored or name in CALLS, f"{name}: neither stored as a table nor called in CALLS"
    key = KEYS[name]
    for table in stored:  # the stored table's rows are the macro's, each unit's under its snapshot
        assert KEYS[table].columns in (key.columns, (hive_key(table), *key.columns)), table
        assert KEYS[table].nullable == key.nullable, table
    if name in CALLS:
        count, shared, nulls = violations(connection, CALLS[name], Key(("call", *key.columns), key.nullable))
        assert count > 0 and (shared, nulls) == (0, {}), f"{name}: {count} rows, {shared} shared key values, nulls: {nulls}"
