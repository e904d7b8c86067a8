"""The ingest floor: DuckDB alone reads a snapshot's JSON files into Parquet with an explicit schema
(each upstream column's type, from schemas/), task files one by one, detail files in one query, and
does nothing else: no validation, no repeats, no histograms.

Usage: python bench/floor_duckdb.py SNAPSHOT_DIR OUT_DIR
"""

import glob
import json
import sys
from pathlib import Path

import duckdb

from schemas import dictionary
from schemas.types import TYPES

# Read from the field dictionary itself: importing the pandera schemas would put pandas and pandera
# (0.5-0.8 s) into a floor that has no validation.
HISTOGRAM = {"output_length_distribution": "STRUCT(bins DOUBLE[], counts BIGINT[])"}


def struct(fields: dict[str, str]) -> str:
    return "STRUCT(" + ", ".join(f'"{key}" {value}' for key, value in fields.items()) + ")"


def columns(table: str, extra: dict[str, str]) -> dict[str, str]:
    """The table's upstream keys with their DuckDB types, nested ones as a STRUCT."""
    flat: dict[str, str] = {}
    nested: dict[str, dict[str, str]] = {}
    for name, entry in dictionary.table_columns(table).items():
        if "upstream" not in entry:
            continue
        duckdb_type, path = TYPES[dictionary.field_type(name)].duckdb, entry.get("json_path", name).split(".")
        if len(path) == 1:
            flat[path[0]] = duckdb_type
        else:
            nested.setdefault(path[0], {})[path[1]] = duckdb_type
    return {**flat, **{root: struct(children) for root, children in nested.items()}, **extra}


def main(source: Path, out: Path) -> None:
    connection = duckdb.connect()
    connection.execute("set enable_progress_bar = false")
    index = json.loads((source / "index.json").read_bytes())
    diffusion = set(index["architectures"].get("diffusion", []))
    for task in index["tasks"]:
        row = columns("diffusion_configurations" if task in diffusion else "token_configurations", {})
        declared = {"configurations": struct(row) + "[]"}
        connection.execute(
            f"copy (select unnest(configurations, recursive := true) from read_json(?, columns := {declared!r},"
            f" maximum_object_size := 2147483647)) to '{out}/{task}.parquet' (format parquet)",
            [str(source / "tasks" / f"{task}.json")],
        )
    detail = {**columns("model_details", HISTOGRAM),
              "configurations": struct(columns("model_detail_configurations", HISTOGRAM)) + "[]"}
    files = sorted(glob.glob(str(source / "models" / "*.json")))
    if files:
        connection.execute(
            f"copy (select * exclude (configurations), unnest(configurations, recursive := true)"
            f" from read_json(?, columns := {detail!r})) to '{out}/details.parquet' (format parquet)",
            [files],
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
