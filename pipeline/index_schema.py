"""JSON Schemas (draft 2020-12) of the index files, versions 1 and 2, generated from the field dictionary
([exports]: each row's keys in order, their descriptions, units and decimals) and the views' column
types: OUT/index/schema/index-v1.schema.json and index-v2.schema.json. One schema per version covers
every file of it: a task's index.json, a model file and (version 1) tiers.json, of token and diffusion
tasks. Every key is required and no other is allowed, so a file missing a field, carrying an unknown
one or holding a value of the wrong type fails."""

from pathlib import Path
from typing import Any

import duckdb

from pipeline import index_v2, jsontext
from pipeline.source_card import load_source_card
from schemas import dictionary

SCHEMA_FOLDER = "schema"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
BASE_ID = "https://github.com/energy-index/energy-index/schemas/"
# The keys every row of its kind must hold a value in (the rest may be null where the upstream gives none).
NOT_NULL = frozenset({"slug", "model_id", "name", "gpu", "row_id", "repeat", "wh_per_million_output_tokens",
                      "wh_per_image", "wh_per_video", "wh_per_unit", "validity", "boundaries"})
_JSON_TYPES = {"BIGINT": "integer", "INTEGER": "integer", "HUGEINT": "integer", "DOUBLE": "number",
               "FLOAT": "number", "VARCHAR": "string", "BOOLEAN": "boolean", "DATE": "string"}
# Where each kind of row's columns come from (the views the export reads them from).
_VIEWS = {"model": "models", "token_configuration": "configurations",
          "diffusion_configuration": "diffusion_configurations_current", "tier": "tiered_best_configurations",
          "index_v2": "index_rows_v2"}


def _column_types(connection: duckdb.DuckDBPyConnection, view: str) -> dict[str, str]:
    # a model's slug is the configuration view's (the models table has none)
    relation = connection.sql(f"select *{', null::varchar as slug' if view == 'models' else ''} from {view} limit 0")
    return {name: str(dtype) for name, dtype in zip(relation.columns, relation.dtypes)}


def _value_schema(duckdb_type: str, decimals: Any, description: str, nullable: bool) -> dict[str, Any]:
    if duckdb_type.endswith("[]"):
        schema: dict[str, Any] = {"type": "array", "items": {"type": _JSON_TYPES[duckdb_type[:-2]]}}
    else:
        json_type = "integer" if decimals == 0 else _JSON_TYPES.get(duckdb_type, "string")
        schema = {"type": [json_type, "null"] if nullable else json_type}
    return {"description": description, **schema}


def _object(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    if description:
        schema["description"] = description
    return {**schema, "properties": properties, "required": list(properties), "additionalProperties": False}


def _row_properties(connection: duckdb.DuckDBPyConnection, kind: str, unit: str | None = None,
                    left_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The properties of one kind of exported row, nested where a key is dotted (version 2's additions)."""
    types = _column_types(connection, _VIEWS[kind])
    family = "diffusion" if unit else "token"
    flat: dict[str, Any] = {}
    for field in dictionary.export_fields(kind):
        key = field["key"].format(unit=unit) if unit else field["key"]
        if key in left_out:
            continue
        # described by its own entry; typed by the view column the family's rows take it from
        typed_by = field["of_family"].get(family, field["column"])
        facts = dictionary.column(_VIEWS[kind], field["column"])
        text = facts.description + (f" Unit: {facts.unit}." if facts.unit else "")
        # a joined text column (its items joined by ', ') is written as a list of them
        column_type = types[typed_by] + "[]" if field["joined"] else types[typed_by]
        flat[key] = _value_schema(column_type, field["decimals"], text, key not in NOT_NULL)
    nested: dict[str, Any] = {}
    for key, schema in flat.items():
        *parents, last = key.split(".")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = schema
    return {key: _as_schema(value) for key, value in nested.items()}


def _as_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A nested group of properties as an object schema, null allowed (version 2 writes a group whose every
    value is null as null)."""
    if "type" in node and "description" in node and not isinstance(node["type"], dict):
        return node
    inner = _object({key: _as_schema(value) for key, value in node.items()})
    return {"anyOf": [inner, {"type": "null"}]}


def _header(version: str) -> dict[str, Any]:
    card = load_source_card()
    source = _object({key: {"type": "array", "items": {"type": "string"}} if isinstance(text, list)
                      else {"type": "string"} for key, text in card.source.items()})
    properties: dict[str, Any] = {
        "version": {"const": version, "description": "The index format's version."},
        "updated": {"type": "string", "format": "date"}, "data_version": {"type": "string", "format": "date"},
        "unit": {"type": "string", "description": "Wh per million output tokens, per image or per video."},
        "source": source, "caveat": {"type": "string"},
        "boundary": {"const": card.index.boundary, "description": "Where the figures' energy is counted."},
    }
    if version != card.index.format_version:
        properties["metric"] = _object(index_v2.metric_stamp_schema(), index_v2.METRIC_DESCRIPTION)
        properties["data_url"] = index_v2.DATA_URL_SCHEMA
    return properties


def _limits() -> dict[str, dict[str, Any]]:
    card = load_source_card()
    return {"token": {card.token.limit_key: {"type": "number"}},
            "diffusion": {card.diffusion.limit_key: {"type": "number"}}}


def _file_schemas(connection: duckdb.DuckDBPyConnection, version: str) -> list[dict[str, Any]]:
    """One schema per kind of file (index, model, tiers) and family (token; image; video)."""
    header, limits, files = _header(version), _limits(), []
    model = _row_properties(connection, "model")
    additions = _row_properties(connection, "index_v2") if version != "1" else {}
    families = [("token", None, "token_configuration", frozenset(), frozenset({"batch_latency_s"})),
                ("diffusion", "image", "diffusion_configuration", frozenset({"num_frames", "fps"}),
                 frozenset({"median_itl_ms", "p90_itl_ms", "p99_itl_ms"})),
                ("diffusion", "video", "diffusion_configuration", frozenset(),
                 frozenset({"median_itl_ms", "p90_itl_ms", "p99_itl_ms"}))]
    for family, unit, kind, left_out, other_metrics in families:
        ordered = list(header)
        head = {**{key: header[key] for key in ordered[:4]}, **limits[family],
                **{key: header[key] for key in ordered[4:]}}
        configuration = _row_properties(connection, kind, unit, left_out)
        best = {**configuration, **additions}
        files.append(_object({**head, "rows": {"type": "array", "items": _object({**model, **best})}},
                             f"A {family} task's index.json" + (f" ({unit}s)" if unit else "")))
        files.append(_object({**head, **model, "gpus": {"type": "array", "items": {"type": "string"}},
                              "configurations": {"type": "array", "items": _object(configuration)},
                              "best": {"type": "object", "additionalProperties": _object(best)}},
                             f"A {family} task's model file" + (f" ({unit}s)" if unit else "")))
        if version == "1":
            tier = _row_properties(connection, "tier", unit, other_metrics)
            files.append(_object({**head, "rows": {"type": "array", "items": _object(tier)}},
                                 f"A {family} task's tiers.json" + (f" ({unit}s)" if unit else "")))
    return files


def index_schema(connection: duckdb.DuckDBPyConnection, version: str) -> dict[str, Any]:
    """The JSON Schema of every index file of `version` ("1" or "2")."""
    return {
        "$schema": DRAFT, "$id": f"{BASE_ID}index-v{version.split('.')[0]}.schema.json",
        "title": f"energy-index index files, format version {version}",
        "description": "Generated from schemas/dictionary.toml ([exports]) and the views' column types "
                       "(pipeline/index_schema.py); docs/index-files.md documents every field.",
        "anyOf": _file_schemas(connection, version),
    }


def write_schemas(connection: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    """OUT/index/schema/index-v1.schema.json and index-v2.schema.json."""
    folder = index_dir / SCHEMA_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for version in ("1", load_source_card().index_v2.format_version):
        # named by the major version, as the files' folder is (index/v2/ holds format 2.1)
        major = version.split(".")[0]
        (folder / f"index-v{major}.schema.json").write_bytes(jsontext.dumps(index_schema(connection, version)))
