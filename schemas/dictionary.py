"""The field dictionary (dictionary.toml) decoded into typed structures, PUDL's way: each field's type,
unit, description, checks and export decimals once ([fields]); each table's columns, key and grain
([tables]); where one table or view means something else by a column, its override ([columns]).
Imports nothing heavy: fetch reads it."""

import functools
from pathlib import Path
from typing import Literal

import msgspec

from schemas.types import TYPES

DICTIONARY = Path(__file__).with_name("dictionary.toml")


class Facts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """What the dictionary says of a column: a field's entry, or an object's override of it."""

    description: str | None = None
    unit: str | None = None
    decimals: int | None = None  # the index files round the column so (0: an integer)
    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None
    min_length: int | None = None
    isin: list[str] | None = None
    matches: str | None = None
    checks: list[str] = []  # rules of schemas/rules.py


class Field(Facts):
    description: str
    type: str | None = None  # a key of schemas/types.py TYPES; a view's columns are typed by DuckDB


class Column(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A column of a declared table: for one ingest writes, the upstream key it is read from, if any
    ("optional": not in every entry, so nullable), nested at json_path; nullable where the pipeline may
    leave it empty."""

    upstream: Literal["required", "optional"] | None = None
    json_path: str | None = None
    nullable: bool = False

    def may_be_null(self) -> bool:
        return self.nullable or self.upstream == "optional"


class Table(msgspec.Struct, forbid_unknown_fields=True):
    # ingested: written by ingest per snapshot and validated there; reference: made by the build from its
    # parameters and declarations, validated there and published as Parquet beside the ingested tables;
    # stored: computed by a table macro of sql/ (its columns typed by DuckDB) and stored per snapshot;
    # build: the build's own record of itself.
    kind: Literal["ingested", "reference", "stored", "build"]
    description: str
    grain: str
    source: str
    key: list[str]
    measured_key: list[str] = []  # what a measured configuration is: rows sharing it are repeats
    row_checks: list[str] = []
    columns: dict[str, Column] = {}  # every kind's but a stored table's, in order


class ExportField(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    column: str
    # rounded as the task's own Wh figure (its configuration field's decimals: 2 per million tokens, 4 per
    # image or video) rather than by the column's decimals: for columns in Wh per unit of either family
    energy: bool = False
    # the column holds a list's items joined by ', ' (a text every BI tool types); the file holds the list
    joined: bool = False
    # the view column each family's rows take the key from, where it differs by family (a latency in ms for
    # token tasks, in s for diffusion); `column` then names the entry that describes the file's key
    of_family: dict[str, str] = {}


class Export(msgspec.Struct, forbid_unknown_fields=True):
    fields: list[ExportField]


class Dictionary(msgspec.Struct):
    tables: dict[str, Table]
    fields: dict[str, Field]
    columns: dict[str, dict[str, str | Facts]]
    exports: dict[str, Export]


@functools.cache
def entries() -> Dictionary:
    """The dictionary, each entry decoded on its own so that an error names it (msgspec names a value
    of a dict only as [...]): "dictionary.toml: [fields.num_gpus]: Object contains unknown field `gee`"."""
    sections = {"tables": Table, "fields": Field, "columns": dict[str, str | Facts], "exports": Export}
    raw = msgspec.toml.decode(DICTIONARY.read_bytes())
    if unknown := raw.keys() - sections.keys():
        raise ValueError(f"{DICTIONARY}: unknown sections {sorted(unknown)}")
    decoded: dict[str, dict] = {section: {} for section in sections}
    for section, kind in sections.items():
        for name, entry in raw.get(section, {}).items():
            try:
                decoded[section][name] = msgspec.convert(entry, kind)
            except msgspec.ValidationError as error:
                raise ValueError(f"{DICTIONARY}: [{section}.{name}]: {error}") from None
            if section == "fields" and decoded[section][name].type not in (None, *TYPES):
                raise ValueError(f"{DICTIONARY}: [fields.{name}] type: {entry['type']!r} is none of {', '.join(TYPES)}")
            if section == "tables" and (decoded[section][name].kind == "stored") == bool(decoded[section][name].columns):
                raise ValueError(f"{DICTIONARY}: [tables.{name}]: a {decoded[section][name].kind} table "
                                 f"{'takes its columns from its macro' if decoded[section][name].columns else 'lists its columns'}"
                                 f" ([tables.{name}.columns])")
    return Dictionary(**decoded)


def table_entry(table: str) -> Table:
    return entries().tables[table]


def tables_of_kind(kind: str) -> tuple[str, ...]:
    """The tables of one kind (Table.kind), in the dictionary's order."""
    return tuple(name for name, entry in entries().tables.items() if entry.kind == kind)


def table_description(table: str) -> str:
    """What the table holds, its grain and its key, worded as the views' headers give theirs."""
    if (entry := entries().tables.get(table)) is None:
        raise KeyError(f"{DICTIONARY.name}: no [tables.{table}]")
    key = f"({', '.join(entry.key)})" if entry.key else "none"
    return f"{entry.description} Grain: {entry.grain}. Key: {key}."


# A table macro NAME_unchecked gives NAME's rows without NAME's checks of its arguments (sql/macros): its
# columns mean what NAME's do, declared once under [columns.NAME].
UNCHECKED = "_unchecked"


def column(object_name: str, name: str) -> Facts:
    """The column's entry: its field's, with what the object says otherwise ([columns.OBJECT])."""
    field = entries().fields.get(name)
    override = entries().columns.get(object_name.removesuffix(UNCHECKED), {}).get(name)
    if field is None and override is None:
        raise KeyError(f"{DICTIONARY.name}: no entry for column {object_name}.{name} ([fields.{name}])")
    overrides = {"description": override} if isinstance(override, str) else msgspec.to_builtins(override or Facts())
    merged = {**msgspec.to_builtins(field or Facts()), **overrides}
    merged.pop("type", None)
    return msgspec.convert(merged, Facts)


def table_columns(table: str) -> dict[str, dict]:
    """A validated table's columns in order, each its checks with its presence upstream and nullability."""
    return {name: {**msgspec.to_builtins(column(table, name)), **msgspec.to_builtins(entry)}
            for name, entry in entries().tables[table].columns.items()}


def field_type(name: str) -> str:
    return entries().fields[name].type


def json_paths(table: str) -> dict[str, tuple[str, ...]]:
    """Where each upstream column of a table sits in its JSON object: the key of its name, or json_path."""
    return {name: tuple((entry.json_path or name).split("."))
            for name, entry in entries().tables[table].columns.items() if entry.upstream}


# export_fields' decimals of a field rounded as the task's own Wh figure ([exports] energy = true).
ENERGY_DECIMALS = "energy"


def export_fields(name: str) -> list[dict]:
    """One kind of exported row's fields in file order: key, view column and the decimals the index files
    round it to (Python's round(); 0 gives an integer) or None ([exports.NAME])."""
    return [{"key": f.key, "column": f.column, "joined": f.joined, "of_family": f.of_family,
             "decimals": ENERGY_DECIMALS if f.energy else entries().fields[f.column].decimals}
            for f in entries().exports[name].fields]
