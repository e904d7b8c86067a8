"""The tables' schemas, generated from the field dictionary (dictionary.py) and the type table (types.py):
pandera's (each column's dtype, nullability, checks and the table's key and row checks), Arrow's (as
validated, and as stored with each field's description and unit) and DuckDB's (the DDL of the tables the
build creates). Pandera and pyarrow are imported only when a step asks for them (pandera_schema,
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
        if rule.warning and rules is COLUMN_CHECKS:  # validate reports the rows a row check warns of, only
            raise ValueError(f"{rule_name}: a warning must be a row check (schemas/rules.py ROW_CHECKS)")
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


def ddl(table: str) -> str:
    """A declared table's columns as DuckDB creates them: each typed, not null unless the dictionary lets
    it be, and its key the primary key when no column of it may be null."""
    entry = dictionary.table_entry(table)
    columns = [f"{name} {TYPES[dictionary.field_type(name)].duckdb}{'' if presence.may_be_null() else ' not null'}"
               for name, presence in entry.columns.items()]
    if entry.key and not any(entry.columns[name].may_be_null() for name in entry.key):
        columns.append(f"primary key ({', '.join(entry.key)})")
    return ", ".join(columns)


def described(table: str, schema: Any, partition_key: str | None = None) -> Any:
    """An Arrow schema as stored: each field's description and unit as Parquet field metadata and the
    table's as schema metadata, so that tools reading the files directly see them; typed for readers
    (for_readers)."""
    import pyarrow

    fields = []
    for field in schema:
        facts = dictionary.column(table, field.name)
        metadata = {"description": facts.description, **({"unit": facts.unit} if facts.unit else {})}
        fields.append(field.with_metadata(metadata))
    return for_readers(pyarrow.schema(fields, metadata={"description": dictionary.table_description(table)}),
                       partition_key)


# pandas' own names of its nullable dtypes, by Arrow type: what pyarrow's to_pandas reads from a file's
# pandas metadata, where without it an integer column with a null becomes float64 and a boolean one object.
_PANDAS_NULLABLE = {"int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64", "bool": "boolean"}


def for_readers(schema: Any, partition_key: str | None = None) -> Any:
    """`schema` as the files are written, so that dataset readers agree with the database with their defaults:
    - the column a hive folder is named after (`partition_key`, <table>/<key>=<id>/) is dictionary-encoded
      text, the type pyarrow (and pandas through it) gives a hive partition column, so that a folder read as
      one dataset has that column once instead of failing on "string vs dictionary" (polars, DuckDB and
      Spark read it as text either way);
    - the pandas metadata names pandas' nullable dtype (Int64, boolean) for each integer or boolean column
      that may be null, so that pandas.read_parquet keeps them integers (and other readers ignore it)."""
    import json

    import pyarrow

    fields = [field.with_type(pyarrow.dictionary(pyarrow.int32(), pyarrow.string()))
              if field.name == partition_key else field for field in schema]
    nullable = [{"name": field.name, "field_name": field.name, "pandas_type": str(field.type),
                 "numpy_type": _PANDAS_NULLABLE[str(field.type)], "metadata": None}
                for field in schema if field.nullable and str(field.type) in _PANDAS_NULLABLE]
    metadata = {key: value for key, value in (schema.metadata or {}).items() if key != b"pandas"}
    if nullable:
        metadata[b"pandas"] = json.dumps({"index_columns": [], "column_indexes": [], "columns": nullable}).encode()
    return pyarrow.schema(fields, metadata=metadata or None)


@functools.cache
def arrow_schema(table: str, stored: bool = False) -> Any:
    """The table's Arrow schema as ingest reads and validates it, or as stored in its per-snapshot files
    (<table>/snapshot_id=<id>/): typed dates and times, described, and typed for readers (for_readers)."""
    import pyarrow

    fields = []
    for name, presence in dictionary.table_entry(table).columns.items():
        field_type = TYPES[dictionary.field_type(name)]
        fields.append(pyarrow.field(name, arrow_type(field_type.stored if stored else field_type.arrow),
                                    nullable=presence.may_be_null()))
    schema = pyarrow.schema(fields)
    return described(table, schema, partition_key="snapshot_id") if stored else schema
