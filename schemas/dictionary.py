"""The field dictionary (dictionary.toml): what every table, view and column means, and for the tables
ingest writes, each column's type, presence upstream and checks. Read by the schemas (pandera, Arrow,
Parquet and the msgspec types of the upstream JSON are generated from it), the build (database
comments, the data_dictionary table), the export and the generated docs/data-dictionary.md.
Imports nothing heavy."""

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

DICTIONARY = Path(__file__).with_name("dictionary.toml")


@dataclass(frozen=True)
class Column:
    description: str
    unit: str | None


@functools.cache
def _entries() -> dict:
    with DICTIONARY.open("rb") as handle:
        return tomllib.load(handle)


def table_description(table: str) -> str:
    try:
        return _entries()["tables"][table]["description"]
    except KeyError:
        raise KeyError(f"{DICTIONARY.name}: no [tables.{table}] description") from None


def table_entry(table: str) -> dict:
    """A table's entry: description, source, and for a validated table its key, row checks and columns."""
    return _entries()["tables"][table]


def validated_tables() -> tuple[str, ...]:
    """The tables ingest writes and pandera validates: those whose columns the dictionary declares."""
    return tuple(name for name, entry in _entries()["tables"].items() if "columns" in entry)


def table_columns(table: str) -> dict[str, dict]:
    """A validated table's columns in order, each with its presence upstream, nullability and checks."""
    return _entries()["tables"][table]["columns"]


def field_type(name: str) -> str:
    """The column's type wherever it appears: string, int64, float64 or bool."""
    return _entries()["fields"][name]["type"]


def export_fields(name: str) -> list[dict]:
    """One kind of exported row's fields in file order: key, view column and decimals ([exports.NAME])."""
    return _entries()["exports"][name]["fields"]


def table_source(table: str) -> str:
    """Where a table's rows come from (an upstream file, or a file of this project)."""
    return _entries()["tables"][table]["source"]


def column(object_name: str, name: str) -> Column:
    """The column's entry: the object's own ([columns.OBJECT]) where it has one, else the field's."""
    entries = _entries()
    field = entries.get("fields", {}).get(name)
    override = entries.get("columns", {}).get(object_name, {}).get(name)
    if field is None and override is None:
        raise KeyError(f"{DICTIONARY.name}: no entry for column {object_name}.{name} ([fields.{name}])")
    field = field or {}
    if isinstance(override, str):
        override = {"description": override}
    merged = {**field, **(override or {})}
    return Column(merged["description"], merged.get("unit"))


def documented_names() -> tuple[set[str], dict[str, set[str]]]:
    """Every field name, and every object's overridden column names (for the test that finds stale entries)."""
    entries = _entries()
    return set(entries.get("fields", {})), {o: set(c) for o, c in entries.get("columns", {}).items()}
