"""The field dictionary (dictionary.toml): what every table, view and column means, read by the build
(database comments, the data_dictionary table), ingest (Parquet field metadata) and the README's
generated data dictionary. Imports nothing heavy."""

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
