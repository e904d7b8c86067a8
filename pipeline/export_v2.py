"""The index files' version 2, beside version 1: OUT/index/v2/<task>/index.json and
OUT/index/v2/<task>/models/<slug>.json, one for each version 1 index.json and model file.

Each row (index.json's rows, a model file's best) is version 1's row, key for key and value for value,
followed by what the view index_rows_v2 adds ([exports.index_v2] in the field dictionary: the range,
the runner-up, the boundaries with their factors, the validity codes, the energy class and Wh per
response). The header is version 1's with the format version ("2.1"), the metric stamp (with the energy
class scale's boundary and source, pipeline/index_v2.toml) and the data URL pinned to the upstream
commit. Views compute; this module selects, rounds and nests.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline import jsontext
from pipeline.reference_tables import energy_class_scale
from pipeline.database import fetch_dicts
from pipeline.errors import PipelineError
from pipeline.source_card import load_source_card
from schemas import dictionary

Row = dict[str, Any]
V2_FIELDS = [(field["key"], field["column"], field["decimals"], field["joined"])
             for field in dictionary.export_fields("index_v2")]
V2_FOLDER = "v2"


def _rounded(value: Any, digits: int | None, joined: bool = False) -> Any:
    if joined:  # the view's text of items joined by ', ' (none: empty) as the file's list
        return value.split(", ") if value else []
    if digits is None or value is None or isinstance(value, (str, bool, list)):
        return value
    return round(value) if digits == 0 else round(value, digits)


def _nested(flat: list[tuple[str, Any]]) -> Row:
    """Dotted keys as nested objects, in the order the keys first appear; an object whose every value is
    null is null itself (a range measured once, no runner-up)."""
    document: Row = {}
    for key, value in flat:
        *parents, last = key.split(".")
        node = document
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = value
    return _null_when_empty(document)


def _null_when_empty(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node = {key: _null_when_empty(value) for key, value in node.items()}
    return None if all(value is None for value in node.values()) else node


def row_additions(energy_decimals: int) -> Callable[[Row], Row]:
    """An index_rows_v2 row to what version 2 adds to its version 1 row, rounded and nested."""
    plan = [(key, column, energy_decimals if digits == dictionary.ENERGY_DECIMALS else digits, joined)
            for key, column, digits, joined in V2_FIELDS]
    return lambda row: _nested([(key, _rounded(row[column], digits, joined)) for key, column, digits, joined in plan])


@dataclass(frozen=True)
class Version2:
    """The version 2 rows of the index snapshot, by (task, model_id, gpu), and the header each task adds."""

    rows: dict[tuple[str, str, str], Row]
    commit: str | None

    @classmethod
    def read(cls, connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any]) -> "Version2":
        rows = fetch_dicts(connection, "select * from index_rows_v2 where snapshot_id = $id",
                           {"id": snapshot["snapshot_id"]})
        return cls({(row["task"], row["model_id"], row["gpu"]): row for row in rows}, snapshot.get("commit"))

    def header(self, header: dict[str, Any], task: str, unit_label: str) -> dict[str, Any]:
        """Version 1's header with the format version, the metric stamp and the pinned data URL, before the model."""
        card, scale = load_source_card().index_v2, energy_class_scale()
        stamp = {"format_version": card.format_version, "unit": header["unit"], "denominator": unit_label,
                 "boundary": header["boundary"], "energy_class_boundary": scale.boundary,
                 "energy_class_scale": scale.source}
        pinned = None if self.commit is None else card.data_url.format(commit=self.commit, task=task)
        return {**header, "version": card.format_version, "metric": stamp, "data_url": pinned}

    def row(self, task: str, v1_row: Row, model_id: str, gpu: str, additions: Callable[[Row], Row]) -> Row:
        try:
            extra = self.rows[(task, model_id, gpu)]
        except KeyError:
            raise PipelineError(f"export: {task}: no index_rows_v2 row for {model_id} on {gpu}") from None
        return {**v1_row, **additions(extra)}


def write(path: Path, document: dict[str, Any], vetted: Iterable[str] = ()) -> None:
    """Write a version 2 file; its floats are spelled as json.dumps spells them, NaN and infinity refused.
    `vetted` names the document's keys whose floats are known to print alike in msgspec and json.dumps (a
    model file's configurations, checked for version 1), which are not walked again: at 100x that walk
    cost the export about 2 s of its 13-15 s of CPU."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(jsontext.dumps({key: value if key in vetted else jsontext.as_json_dumps_writes(value)
                                         for key, value in document.items()}, floats_vetted=True))
    except ValueError as error:
        raise PipelineError("values the index format cannot hold", [f"{path.name}: {error}"]) from None
