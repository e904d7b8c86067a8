"""Every table the build creates is declared once, in the field dictionary: its columns' types and
nullability in the database are those the dictionary declares, and its constraints are checked."""

import duckdb
import pytest

from pipeline.build import CHANGE_RELATIVE_TOLERANCE
from pipeline.errors import PipelineError
from pipeline.paths import Paths, order_column
from pipeline.reference_tables import load_reference_tables
from schemas import dictionary
from schemas.types import TYPES


def test_every_table_but_a_stored_one_has_the_declared_columns_types_and_nullability(newest_build: Paths) -> None:
    # An ingested table is loaded from Parquet, whose columns DuckDB reads as nullable: only its types count.
    def shown(table: str, columns: list[tuple[str, str, bool]]) -> list[tuple]:
        ingested = dictionary.table_entry(table).kind == "ingested"
        return [(name, data_type, None if ingested else nullable) for name, data_type, nullable in columns]

    # An ingested table's order column is its files' alone (pipeline.paths.order_column).
    declared = {table: shown(table, [(name, TYPES[dictionary.field_type(name)].duckdb, presence.may_be_null())
                                     for name, presence in entry.columns.items()
                                     if not (entry.kind == "ingested" and name == order_column(table))])
                for table, entry in dictionary.entries().tables.items() if entry.kind != "stored"}
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        built = {table: shown(table, columns) for table, columns in connection.execute(
            "select table_name, list((column_name, data_type, is_nullable) order by column_index)"
            " from duckdb_columns() where table_name in (select table_name from duckdb_tables()) group by all"
        ).fetchall() if table in declared}
    assert built == declared


def test_a_reference_row_that_breaks_a_declared_constraint_fails_the_build_naming_it() -> None:
    with pytest.raises(PipelineError) as refused:
        load_reference_tables(duckdb.connect(), (None, 500.0, -CHANGE_RELATIVE_TOLERANCE, "0.0.0", None))
    assert refused.value.details == [f"build_parameters [row 0] column change_relative_tolerance: "
                                     f"change_relative_tolerance={-CHANGE_RELATIVE_TOLERANCE} fails check greater_than(0)"]
