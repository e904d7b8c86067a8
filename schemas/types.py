"""The one type table: each field type of the dictionary ([fields.NAME] type) as every engine spells it.
Imports nothing heavy: Arrow types are named (pyarrow.type_for_alias), pandas dtypes are pandera's names."""

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

# msgspec's int is unbounded; a JSON integer must fit the int64 column it goes to.
INT64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


@dataclass(frozen=True)
class FieldType:
    pandas: str  # the dtype pandera checks and coerces to
    arrow: str  # as read from the upstream and validated
    stored: str  # as written to Parquet and seen by the database
    duckdb: str
    json: Any  # the upstream JSON value, as msgspec decodes it
    frictionless: str  # Table Schema field type
    croissant: str  # schema.org data type
    check: str | None = None  # the rule (schemas/rules.py) that text stored typed must pass


TYPES = {
    "string": FieldType("str", "string", "string", "VARCHAR", str, "string", "sc:Text"),
    "int64": FieldType("Int64", "int64", "int64", "BIGINT", INT64, "integer", "sc:Integer"),
    "int32": FieldType("Int32", "int32", "int32", "INTEGER", INT64, "integer", "sc:Integer"),
    "float64": FieldType("float64", "float64", "float64", "DOUBLE", float, "number", "sc:Float"),
    "float32": FieldType("float32", "float32", "float32", "FLOAT", float, "number", "sc:Float"),
    "bool": FieldType("boolean", "bool", "bool", "BOOLEAN", bool, "boolean", "sc:Boolean"),
    # ISO 8601 text as the upstream and the manifest spell it, stored typed for Parquet readers and the database.
    "date": FieldType("str", "string", "date32", "DATE", str, "date", "sc:Date", "calendar_date"),
    "timestamptz": FieldType("str", "string", "timestamp[us, tz=UTC]", "TIMESTAMP WITH TIME ZONE", str, "datetime",
                             "sc:DateTime", "iso_8601_time"),
}
BY_DUCKDB = {field_type.duckdb: field_type for field_type in TYPES.values()}


def arrow_type(alias: str) -> Any:
    import pyarrow

    return pyarrow.timestamp("us", tz="UTC") if alias == "timestamp[us, tz=UTC]" else pyarrow.type_for_alias(alias)
