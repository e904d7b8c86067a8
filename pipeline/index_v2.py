"""The index files' version 2, beside version 1: OUT/index/v2/<task>/index.json and
OUT/index/v2/<task>/models/<slug>.json, one for each version 1 index.json and model file. The format is
here, but for what is data:

- each row (index.json's rows, a model file's best) is version 1's row, key for key and value for value,
  followed by what the view index_rows_v2 adds (sql/marts/index_rows_v2.sql; the keys, their order and
  decimals: [exports.index_v2] in the field dictionary): the range, the runner-up, the boundaries with
  their factors, the validity codes, the energy class and Wh per response;
- the header is version 1's with the format version ("2.1"), the metric stamp (with the energy class
  scale's boundary and source) and the data URL pinned to the upstream commit (pipeline/source_card.toml
  [index_v2]); the stamp's JSON Schema stands beside it (pipeline/index_schema.py reads it);
- the validity codes and the energy class scale are declared in pipeline/index_v2.toml, loaded with the
  other declarations into the reference tables validity_codes and energy_classes.

Views compute; this module selects, rounds and nests.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline import jsontext
from pipeline.database import fetch_dicts
from pipeline.errors import PipelineError
from pipeline.reference_tables import energy_class_scale
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


def metric_stamp(header: dict[str, Any], unit_label: str) -> dict[str, Any]:
    """What every figure of a task's files measures: the format version, the unit and what it is per, the
    boundary of the figures and the one the energy class letters are read at, and the scale's source."""
    scale = energy_class_scale()
    return {"format_version": load_source_card().index_v2.format_version, "unit": header["unit"],
            "denominator": unit_label, "boundary": header["boundary"], "energy_class_boundary": scale.boundary,
            "energy_class_scale": scale.source}


def metric_stamp_schema() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each key of metric_stamp, in its order."""
    card, scale = load_source_card(), energy_class_scale()
    return {
        "format_version": {"const": card.index_v2.format_version}, "unit": {"type": "string"},
        "denominator": {"type": "string"}, "boundary": {"const": card.index.boundary},
        "energy_class_boundary": {"const": scale.boundary, "description": "The boundary whose figures the "
                                  "energy class letters are read at."},
        "energy_class_scale": {"const": scale.source, "description": "The energy class scale's source."},
    }


METRIC_DESCRIPTION = "The metric stamp: what every figure of the file measures."
DATA_URL_SCHEMA = {"type": ["string", "null"], "description": "The task's upstream file at the snapshot's commit."}


@dataclass(frozen=True)
class Version2:
    """The version 2 rows of the index snapshot, by (task, model_id, gpu), and the folder its files go to."""

    rows: dict[tuple[str, str, str], Row]
    commit: str | None
    root: Path

    @classmethod
    def read(cls, connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any], index_dir: Path) -> "Version2":
        rows = fetch_dicts(connection, "select * from index_rows_v2 where snapshot_id = $id",
                           {"id": snapshot["snapshot_id"]})
        return cls({(row["task"], row["model_id"], row["gpu"]): row for row in rows}, snapshot.get("commit"),
                   index_dir / V2_FOLDER)

    def task(self, task: str, header: dict[str, Any], unit_label: str, energy_decimals: int) -> "TaskFiles":
        """The writer of one task's files, from its version 1 header, unit label and Wh decimals."""
        card = load_source_card().index_v2
        pinned = None if self.commit is None else card.data_url.format(commit=self.commit, task=task)
        v2_header = {**header, "version": card.format_version, "metric": metric_stamp(header, unit_label),
                     "data_url": pinned}
        return TaskFiles(self, task, frozenset(header), v2_header, row_additions(energy_decimals))


@dataclass(frozen=True)
class TaskFiles:
    """One task's version 2 files, each written from its version 1 document: version 1's header with the
    format version, the metric stamp and the pinned data URL, before the model; each row with its additions."""

    version2: Version2
    task: str
    v1_header_keys: frozenset[str]
    header: dict[str, Any]
    additions: Callable[[Row], Row]

    def _row(self, v1_row: Row, model_id: str, gpu: str) -> Row:
        try:
            extra = self.version2.rows[(self.task, model_id, gpu)]
        except KeyError:
            raise PipelineError(f"export: {self.task}: no index_rows_v2 row for {model_id} on {gpu}") from None
        return {**v1_row, **self.additions(extra)}

    def write_model_file(self, slug: str, v1_document: dict[str, Any], configurations_vetted: bool) -> None:
        """models/<slug>.json from version 1's: its model fields, GPUs and configurations, and its best rows
        with their additions. `configurations_vetted`: version 1 found their floats print alike."""
        body = {key: value for key, value in v1_document.items() if key not in self.v1_header_keys}
        best = {gpu: self._row(row, v1_document["model_id"], gpu) for gpu, row in v1_document["best"].items()}
        write(self.version2.root / self.task / "models" / f"{slug}.json", {**self.header, **body, "best": best},
              vetted=("configurations",) if configurations_vetted else ())

    def write_index(self, v1_rows: list[Row]) -> None:
        """index.json from version 1's rows (each with its model's fields), each with its additions."""
        rows = [self._row(row, row["model_id"], row["gpu"]) for row in v1_rows]
        write(self.version2.root / self.task / "index.json", {**self.header, "rows": rows})


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
