"""The tables' schemas, generated from the field dictionary (dictionary.py) and the type table (types.py):
pandera's (each column's dtype, nullability, checks and the table's key and row checks), Arrow's (as
validated, and as stored with each field's description and unit) and DuckDB's (the DDL of the tables the
build creates). Pandera and pyarrow are imported only when a step asks for them (TABLES, pandera_schema,
arrow_schema), not when fetch reads the dictionary."""

import functools
from typing import Any

from schemas import dictionary
from schemas.types import TYPES, arrow_type

# The tables ingest writes and validates, and those the build makes from its parameters and declarations
# (validated by the build, published as Parquet): each kind in the dictionary's order.
TABLE_NAMES = dictionary.tables_of_kind("ingested")
REFERENCE_TABLES = dictionary.tables_of_kind("reference")


@functools.cache
def pandera_schema(table: str) -> Any:
    """A declared table's pandera schema: each column's dtype, nullability and checks, the table's key
    (unique) and its row checks."""
    import pandera.pandas as pa

    from schemas.rules import COLUMN_CHECKS, ROW_CHECKS

    def check(rule_name: str, rules: dict) -> "pa.Check":
        rule = rules[rule_name]
        return pa.Check(rule.test, name=rule_name, error=rule.error, raise_warning=rule.warning)

    entry, columns = dictionary.table_entry(table), {}
    for name, presence in entry.columns.items():
        facts, field_type = dictionary.column(table, name), TYPES[dictionary.field_type(name)]
        # The dictionary's constraints, as the pandera built-in checks of these names.
        by_name = {"ge": facts.ge, "gt": facts.gt, "le": facts.le, "isin": facts.isin, "str_matches": facts.matches}
        checks = [pa.Check.str_length(min_value=facts.min_length)] if facts.min_length else []
        checks += [getattr(pa.Check, kind)(value) for kind, value in by_name.items() if value is not None]
        checks += [check(rule, COLUMN_CHECKS) for rule in [field_type.check, *facts.checks] if rule]
        columns[name] = pa.Column(field_type.pandas, nullable=presence.may_be_null(), name=name,
                                  description=facts.description, checks=checks)
    return pa.DataFrameSchema(
        columns, checks=[check(rule, ROW_CHECKS) for rule in entry.row_checks],
        strict=True, coerce=True, unique=entry.key or None, report_duplicates="all", name=table,
    )


def __getattr__(name: str) -> Any:
    if name == "TABLES":  # the ingested tables' pandera schemas
        return {table: pandera_schema(table) for table in TABLE_NAMES}
    raise AttributeError(name)


def ddl(table: str) -> str:
    """A declared table's columns as DuckDB creates them: each typed, not null unless the dictionary lets
    it be, and its key the primary key when no column of it may be null."""
    entry = dictionary.table_entry(table)
    columns = [f"{name} {TYPES[dictionary.field_type(name)].duckdb}{'' if presence.may_be_null() else ' not null'}"
               for name, presence in entry.columns.items()]
    if entry.key and not any(entry.columns[name].may_be_null() for name in entry.key):
        columns.append(f"primary key ({', '.join(entry.key)})")
    return ", ".join(columns)


def described(table: str, schema: Any) -> Any:
    """An Arrow schema as stored: each field's description and unit as Parquet field metadata and the
    table's as schema metadata, so that tools reading the files directly see them."""
    import pyarrow

    fields = []
    for field in schema:
        facts = dictionary.column(table, field.name)
        metadata = {"description": facts.description, **({"unit": facts.unit} if facts.unit else {})}
        fields.append(field.with_metadata(metadata))
    return pyarrow.schema(fields, metadata={"description": dictionary.table_description(table)})


@functools.cache
def arrow_schema(table: str, stored: bool = False) -> Any:
    """The table's Arrow schema as ingest reads and validates it, or as stored: typed dates and times, and
    described."""
    import pyarrow

    fields = []
    for name, presence in dictionary.table_entry(table).columns.items():
        field_type = TYPES[dictionary.field_type(name)]
        fields.append(pyarrow.field(name, arrow_type(field_type.stored if stored else field_type.arrow),
                                    nullable=presence.may_be_null()))
    schema = pyarrow.schema(fields)
    return described(table, schema) if stored else schema
