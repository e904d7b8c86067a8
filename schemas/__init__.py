"""The tables' schemas, generated from the field dictionary (dictionary.py) and the type table (types.py):
pandera's (each column's dtype, nullability, checks and the table's key and row checks) and Arrow's (as
validated, and as stored with each field's description and unit). Pandera and pyarrow are imported only
when a step asks for them (TABLES, arrow_schema), not when fetch reads the dictionary."""

import functools
from typing import Any

from schemas import dictionary
from schemas.types import TYPES, arrow_type

# The tables ingest writes and pandera validates: those whose columns the dictionary lists.
TABLE_NAMES = tuple(name for name, entry in dictionary.entries().tables.items() if entry.columns)

# The dictionary's constraints as pandera's built-in checks.
_BUILT_IN_CHECKS = {"ge": "greater_than_or_equal_to", "gt": "greater_than", "le": "less_than_or_equal_to",
                    "isin": "isin", "matches": "str_matches"}


@functools.cache
def _schemas() -> dict[str, Any]:
    import pandera.pandas as pa

    from schemas.rules import COLUMN_CHECKS, ROW_CHECKS

    def check(rule_name: str, rules: dict) -> "pa.Check":
        rule = rules[rule_name]
        return pa.Check(rule.test, name=rule_name, error=rule.error, raise_warning=rule.warning)

    tables = {}
    for table in TABLE_NAMES:
        entry, columns = dictionary.table_entry(table), {}
        for name, presence in entry.columns.items():
            facts, field_type = dictionary.column(table, name), TYPES[dictionary.field_type(name)]
            built_in = [pa.Check.str_length(min_value=facts.min_length)] if facts.min_length else []
            built_in += [getattr(pa.Check, check_name)(getattr(facts, key))
                         for key, check_name in _BUILT_IN_CHECKS.items() if getattr(facts, key) is not None]
            columns[name] = pa.Column(
                field_type.pandas, nullable=presence.may_be_null(), name=name, description=facts.description,
                checks=built_in + [check(rule, COLUMN_CHECKS) for rule in [field_type.check, *facts.checks] if rule])
        tables[table] = pa.DataFrameSchema(
            columns, checks=[check(rule, ROW_CHECKS) for rule in entry.row_checks],
            strict=True, coerce=True, unique=entry.key, report_duplicates="all", name=table,
        )
    return tables


def __getattr__(name: str) -> Any:
    if name == "TABLES":
        return _schemas()
    raise AttributeError(name)


@functools.cache
def arrow_schema(table: str, stored: bool = False) -> Any:
    """The table's Arrow schema as ingest reads and validates it, or as stored: typed dates and times,
    each field's description and unit as Parquet field metadata and the table's as schema metadata, so
    that tools reading the files directly see them."""
    import pyarrow

    fields = []
    for name, presence in dictionary.table_entry(table).columns.items():
        field_type, facts = TYPES[dictionary.field_type(name)], dictionary.column(table, name)
        metadata = {"description": facts.description, **({"unit": facts.unit} if facts.unit else {})}
        fields.append(pyarrow.field(name, arrow_type(field_type.stored if stored else field_type.arrow),
                                    nullable=presence.may_be_null(), metadata=metadata if stored else None))
    return pyarrow.schema(fields, metadata={"description": dictionary.table_description(table)} if stored else None)


def measured_key(table: str) -> list[str]:
    """What defines a measured configuration of a task-file table: rows sharing it are repeats."""
    return dictionary.table_entry(table).measured_key
