"""Ingest: flatten one fetched snapshot into Parquet tables, each validated by its schema in schemas/.

Nothing is written unless every table passes; a failed ingest leaves the previous tables in place.
"""

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.errors import PipelineError
from pipeline.fetch import TASK_NAME_PATTERN, check_snapshot_id, read_manifest
from pipeline.files import atomic_path, load_json_strict
from pipeline.paths import Paths
from pipeline.source_card import load_source_card
from pipeline.validate import arrow_schema, json_paths, upstream_columns, validate_tables
from schemas import (
    DiffusionConfigurations,
    ModelDetailConfigurations,
    ModelDetails,
    Models,
    OutputLengthHistograms,
    Snapshots,
    Tasks,
    TokenConfigurations,
)
from schemas.diffusion_configurations import CONFIGURATION_KEY as DIFFUSION_KEY
from schemas.token_configurations import CONFIGURATION_KEY as TOKEN_KEY

TOKEN_FAMILIES = ("llm", "mllm")
DIFFUSION_FAMILY = "diffusion"
INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclass
class IngestResult:
    snapshot_id: str
    row_counts: dict[str, int]
    notices: list[str] = field(default_factory=list)


class _Problems:
    """Collects every input problem of a run so they are reported together."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def raise_if_any(self, headline: str) -> None:
        if self.items:
            raise PipelineError(f"{headline}: {len(self.items)} problem(s)", self.items[:200])


def _key_part(value: Any) -> Any:
    """A JSON value as a hashable key part; a mistyped list or object stays hashable until its type error is reported."""
    return value if value is None or isinstance(value, (str, int, float)) else json.dumps(value, sort_keys=True)


def _typed_value(value: Any, arrow_type: pyarrow.DataType) -> tuple[Any, str | None]:
    """Return (value, None) when `value` is of the declared JSON type, else (None, why not)."""
    if value is None:
        return None, None
    if pyarrow.types.is_integer(arrow_type):
        if isinstance(value, bool) or not isinstance(value, int):
            return None, f"expected an integer, got {json.dumps(value)[:60]}"
        if not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
            return None, f"integer {value} is out of the 64-bit range"
        return value, None
    if pyarrow.types.is_floating(arrow_type):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, f"expected a number, got {json.dumps(value)[:60]}"
        if isinstance(value, int) and abs(value) > 2**53:
            return None, f"integer {value} cannot be held exactly as a 64-bit float"
        return float(value), None
    if pyarrow.types.is_boolean(arrow_type):
        if not isinstance(value, bool):
            return None, f"expected true or false, got {json.dumps(value)[:60]}"
        return value, None
    if pyarrow.types.is_string(arrow_type):
        if not isinstance(value, str):
            return None, f"expected a string, got {json.dumps(value)[:60]}"
        return value, None
    raise TypeError(f"no JSON reading declared for {arrow_type}")


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """(present, value) of the nested key `path` in `obj`."""
    if len(path) == 1:
        return path[0] in obj, obj.get(path[0])
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


def _leftovers(obj: Any, consumed: set[tuple[str, ...]], prefix: tuple[str, ...] = ()) -> Any:
    """What of `obj` no declared path consumed: unknown keys, kept so nothing is lost."""
    if not isinstance(obj, dict):
        return obj
    rest = {}
    for key, value in obj.items():
        path = (*prefix, key)
        if path in consumed:
            continue
        if isinstance(value, dict) and any(c[: len(path)] == path for c in consumed):
            nested = _leftovers(value, consumed, path)
            if nested:
                rest[key] = nested
        else:
            rest[key] = value
    return rest


def _flatten_objects(
    objects: list[tuple[str, dict[str, Any]]],
    model: type,
    added: dict[str, list[Any]],
    problems: _Problems,
    handled: frozenset[str] = frozenset(),
) -> pyarrow.Table:
    """One row per (where, object): upstream columns by declared type, unknown keys kept in extra_fields.

    `added` holds the pipeline's own columns, one list per column, aligned with `objects`; a column
    the schema does not declare is ignored. Keys in `handled` are read elsewhere (into another table).
    """
    schema = arrow_schema(model)
    upstream = upstream_columns(model)
    paths = json_paths(model)
    consumed = set(paths.values()) | {(key,) for key in handled}
    # Keys read whole at the top level; a key with nested declared paths needs _leftovers.
    flat_keys = {path[0] for path in consumed if len(path) == 1}
    nested_keys = {path[0] for path in consumed if len(path) > 1}
    plan = [(name, paths[name], presence == "required", schema.field(name).type) for name, presence in upstream.items()]
    columns: dict[str, list[Any]] = {name: [] for name in upstream}
    extras: list[str | None] = []
    missing: Counter[tuple[str, str]] = Counter()
    for where, obj in objects:
        for name, path, required, arrow_type in plan:
            if len(path) == 1:
                present, raw = path[0] in obj, obj.get(path[0])
            else:
                present, raw = _dig(obj, path)
            if not present and required:
                missing[(where.split(":")[0], ".".join(path))] += 1
            if raw is None:
                columns[name].append(None)
                continue
            value, why_not = _typed_value(raw, arrow_type)
            if why_not:
                problems.add(f"{where}: field '{'.'.join(path)}': {why_not}")
            columns[name].append(value)
        unknown = {key: value for key, value in obj.items() if key not in flat_keys and key not in nested_keys}
        for key in nested_keys & obj.keys():
            rest = _leftovers(obj[key], consumed, (key,))
            if rest:
                unknown[key] = rest
        extras.append(json.dumps(unknown, sort_keys=True, ensure_ascii=False) if unknown else None)
    for (file_name, name), count in sorted(missing.items()):
        problems.add(f"{file_name}: missing required field '{name}' in {count} entr{'y' if count == 1 else 'ies'}")
    data = {**added, **columns, "extra_fields": extras}
    return pyarrow.table({name: data[name] for name in schema.names}, schema=schema)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise PipelineError(message)


def _verify_files(snapshot_dir: Path, manifest: dict[str, Any]) -> None:
    for entry in manifest.get("files", []):
        path = snapshot_dir / entry["path"]
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            raise PipelineError(f"{path}: missing or changed since it was fetched; fetch the snapshot again")


def _read_index(snapshot_dir: Path) -> dict[str, Any]:
    index = load_json_strict(snapshot_dir / "index.json", "index.json")
    _expect(isinstance(index, dict), "index.json: must be a JSON object")
    for name, kind in (("models", dict), ("tasks", list), ("architectures", dict), ("last_updated", str)):
        _expect(name in index, f"index.json: missing required field '{name}'")
        _expect(isinstance(index[name], kind), f"index.json: field '{name}' must be a JSON {kind.__name__}")
    for task in index["tasks"]:
        # A task name becomes a file and folder name: only a closed alphabet may reach a path.
        _expect(
            isinstance(task, str) and bool(TASK_NAME_PATTERN.match(task)),
            f"index.json: task {task!r} is not a task name (lower-case letters, digits and '-')",
        )
    return index


def _task_families(index: dict[str, Any]) -> dict[str, str]:
    families = {}
    for family, tasks in index["architectures"].items():
        _expect(isinstance(tasks, list), f"index.json: architectures.{family} must be a list of tasks")
        families.update({task: family for task in tasks})
    return families


def _read_task_file(snapshot_dir: Path, task: str) -> dict[str, Any]:
    name = f"tasks/{task}.json"
    _expect((snapshot_dir / name).is_file(), f"{name}: missing, though index.json lists task '{task}'")
    document = load_json_strict(snapshot_dir / name, name)
    _expect(isinstance(document, dict), f"{name}: must be a JSON object")
    _expect("configurations" in document, f"{name}: missing required field 'configurations'")
    rows = document["configurations"]
    _expect(isinstance(rows, list), f"{name}: field 'configurations' must be a list")
    for ordinal, row in enumerate(rows):
        _expect(isinstance(row, dict), f"{name}: configurations[{ordinal}] must be a JSON object")
    _expect(isinstance(document.get("task_display_name"), str), f"{name}: missing required field 'task_display_name'")
    return document


def _snapshots_table(snapshot_id: str, manifest: dict[str, Any], index: dict[str, Any]) -> pyarrow.Table:
    upstream = manifest.get("upstream", {})
    files = manifest["files"]
    row = {
        "snapshot_id": snapshot_id,
        "source": manifest["source"],
        "retrieved": manifest["retrieved"],
        "commit": upstream.get("commit"),
        "commit_time": upstream.get("commit_time"),
        "commit_subject": upstream.get("commit_subject"),
        "tasks_last_commit_date": upstream.get("tasks_last_commit_date"),
        "last_updated": index["last_updated"],
        "file_count": len(files),
        "total_bytes": sum(f["size"] for f in files),
    }
    return pyarrow.Table.from_pylist([row], schema=arrow_schema(Snapshots))


def _configurations_table(
    snapshot_id: str,
    task_documents: dict[str, dict[str, Any]],
    model: type,
    configuration_key: list[str],
    problems: _Problems,
) -> pyarrow.Table:
    """One row per task-file entry, with `repeat` counted over `configuration_key` in file order."""
    objects, tasks, ordinals, repeats = [], [], [], []
    seen: Counter[tuple[Any, ...]] = Counter()
    for task, document in task_documents.items():
        for ordinal, row in enumerate(document["configurations"]):
            key = tuple(task if column == "task" else _key_part(row.get(column)) for column in configuration_key)
            seen[key] += 1
            objects.append((f"tasks/{task}.json: configurations[{ordinal}] (model_id={row.get('model_id')})", row))
            tasks.append(task)
            ordinals.append(ordinal)
            repeats.append(seen[key])
    added = {
        "snapshot_id": [snapshot_id] * len(objects),
        "task": tasks,
        "source_ordinal": ordinals,
        "repeat": repeats,
        "is_avg_output_len_derived": [row.get("avg_output_len") is None for _, row in objects],
    }
    return _flatten_objects(objects, model, added, problems)


def _derive_avg_output_len(table: pyarrow.Table) -> pyarrow.Table:
    """The upstream defines energy per request as energy per token × average output length."""
    if table.num_rows == 0 or not pc.any(table["is_avg_output_len_derived"]).as_py():
        return table
    quotient = pc.divide(table["energy_per_request_joules"], table["energy_per_token_joules"])
    filled = pc.if_else(table["is_avg_output_len_derived"], quotient, table["avg_output_len"])
    return table.set_column(table.schema.get_field_index("avg_output_len"), "avg_output_len", filled)


def _histogram_rows(
    where: str, distribution: Any, identity: dict[str, Any], problems: _Problems
) -> list[dict[str, Any]]:
    """One row per bin of an output_length_distribution {bins: [n + 1 edges], counts: [n]}."""
    bins = distribution.get("bins") if isinstance(distribution, dict) else None
    counts = distribution.get("counts") if isinstance(distribution, dict) else None
    numbers_ok = isinstance(bins, list) and all(
        isinstance(edge, (int, float)) and not isinstance(edge, bool) for edge in bins
    )
    counts_ok = isinstance(counts, list) and all(
        isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= INT64_RANGE[1] for count in counts
    )
    extra = sorted(set(distribution) - {"bins", "counts"}) if isinstance(distribution, dict) else []
    if not (numbers_ok and counts_ok) or len(bins) != len(counts) + 1 or extra:
        problems.add(
            f"{where}: output_length_distribution must be {{bins: numbers, counts: counts}} with one more bin "
            "edge than counts"
        )
        return []
    return [
        {**identity, "bin_index": i, "lower_edge": float(bins[i]), "upper_edge": float(bins[i + 1]), "count": count}
        for i, count in enumerate(counts)
    ]


def _detail_tables(
    snapshot_id: str, snapshot_dir: Path, families: dict[str, str], problems: _Problems
) -> dict[str, tuple[type, pyarrow.Table]]:
    """The per-model detail files: model-level rows, their configurations and their histograms."""
    model_objects, file_names, configuration_counts = [], [], []
    configuration_objects, configuration_added = [], {"task": [], "model_id": [], "detail_ordinal": [], "repeat": []}
    histograms: list[dict[str, Any]] = []
    detail_paths = json_paths(ModelDetailConfigurations)
    for path in sorted((snapshot_dir / "models").glob("*.json")):
        name = f"models/{path.name}"
        document = load_json_strict(path, name)
        _expect(isinstance(document, dict), f"{name}: must be a JSON object")
        rows = document.get("configurations")
        _expect(isinstance(rows, list), f"{name}: missing required field 'configurations' (a list)")
        task, model_id = document.get("task"), document.get("model_id")
        if task not in families:
            problems.add(f"{name}: task {task!r} is not a task index.json lists")
            continue
        model_objects.append((name, document))
        file_names.append(path.name)
        configuration_counts.append(len(rows))
        if "output_length_distribution" in document:
            histograms += _histogram_rows(
                name, document["output_length_distribution"],
                {"snapshot_id": snapshot_id, "task": task, "model_id": model_id, "scope": "model", "detail_ordinal": None},
                problems,
            )
        key_columns = TOKEN_KEY if families[task] in TOKEN_FAMILIES else DIFFUSION_KEY
        seen: Counter[tuple[Any, ...]] = Counter()
        for ordinal, row in enumerate(rows):
            where = f"{name}: configurations[{ordinal}]"
            if not isinstance(row, dict):
                problems.add(f"{where}: must be a JSON object")
                continue
            key = tuple(_key_part(_dig(row, detail_paths[column])[1]) for column in key_columns if column in detail_paths)
            seen[key] += 1
            configuration_objects.append((where, row))
            for column, value in (("task", task), ("model_id", model_id), ("detail_ordinal", ordinal), ("repeat", seen[key])):
                configuration_added[column].append(value)
            if "output_length_distribution" in row:
                histograms += _histogram_rows(
                    where, row["output_length_distribution"],
                    {"snapshot_id": snapshot_id, "task": task, "model_id": model_id, "scope": "configuration",
                     "detail_ordinal": ordinal},
                    problems,
                )
    details = _flatten_objects(
        model_objects, ModelDetails,
        {"snapshot_id": [snapshot_id] * len(model_objects), "file_name": file_names,
         "configuration_count": configuration_counts},
        problems, handled=frozenset({"configurations", "output_length_distribution"}),
    )
    configurations = _flatten_objects(
        configuration_objects, ModelDetailConfigurations,
        {"snapshot_id": [snapshot_id] * len(configuration_objects), **configuration_added},
        problems, handled=frozenset({"output_length_distribution"}),
    )
    histogram_table = pyarrow.Table.from_pylist(histograms, schema=arrow_schema(OutputLengthHistograms))
    return {
        "model_details": (ModelDetails, details),
        "model_detail_configurations": (ModelDetailConfigurations, configurations),
        "output_length_histograms": (OutputLengthHistograms, histogram_table),
    }


def flatten_snapshot(paths: Paths, snapshot_id: str) -> tuple[dict[str, tuple[type, pyarrow.Table]], list[str]]:
    """Read a fetched snapshot into the tables of schemas/, unvalidated. Returns the tables and notices."""
    snapshot_dir = paths.raw_snapshot(check_snapshot_id(snapshot_id))
    manifest = read_manifest(snapshot_dir)
    _verify_files(snapshot_dir, manifest)
    index = _read_index(snapshot_dir)
    families = _task_families(index)
    labels = load_source_card()["workload_labels"]
    notices: list[str] = []
    problems = _Problems()

    task_documents = {}
    for task in index["tasks"]:
        _expect(isinstance(task, str) and task in families, f"index.json: task {task!r} has no family in architectures")
        task_documents[task] = _read_task_file(snapshot_dir, task)
    task_rows = []
    known_task_keys = {"task", "task_display_name", "architecture", "configurations"}
    for position, (task, document) in enumerate(task_documents.items()):
        if document.get("task", task) != task:
            problems.add(f"tasks/{task}.json: its task field says {document['task']!r}")
        architecture = document.get("architecture")
        if architecture is not None and not isinstance(architecture, str):
            problems.add(f"tasks/{task}.json: field 'architecture' must be a string")
        unknown = {key: value for key, value in document.items() if key not in known_task_keys}
        if task not in labels:
            notices.append(f"task {task}: no workload label in the source card; using its display name")
        task_rows.append(
            {
                "snapshot_id": snapshot_id,
                "task": task,
                "display_name": document["task_display_name"],
                "workload_label": labels.get(task, document["task_display_name"]),
                "family": families[task],
                "index_position": position,
                "file_architecture": architecture if isinstance(architecture, str) else None,
                "file_extra_fields": json.dumps(unknown, sort_keys=True, ensure_ascii=False) if unknown else None,
            }
        )

    model_objects = []
    for model_id, metadata in index["models"].items():
        _expect(isinstance(metadata, dict), f"index.json: models.{model_id} must be a JSON object")
        model_objects.append((f"index.json: models[{model_id!r}]", metadata))
    models = _flatten_objects(
        model_objects,
        Models,
        {"snapshot_id": [snapshot_id] * len(model_objects), "model_id": list(index["models"])},
        problems,
    )
    token_documents = {t: d for t, d in task_documents.items() if families[t] in TOKEN_FAMILIES}
    diffusion_documents = {t: d for t, d in task_documents.items() if families[t] == DIFFUSION_FAMILY}
    token = _configurations_table(snapshot_id, token_documents, TokenConfigurations, TOKEN_KEY, problems)
    diffusion = _configurations_table(
        snapshot_id, diffusion_documents, DiffusionConfigurations, DIFFUSION_KEY, problems
    )
    details = _detail_tables(snapshot_id, snapshot_dir, families, problems)
    problems.raise_if_any(f"snapshot {snapshot_id} has input problems")

    tables = {
        "snapshots": (Snapshots, _snapshots_table(snapshot_id, manifest, index)),
        "tasks": (Tasks, pyarrow.Table.from_pylist(task_rows, schema=arrow_schema(Tasks))),
        "models": (Models, models),
        "token_configurations": (TokenConfigurations, _derive_avg_output_len(token)),
        "diffusion_configurations": (DiffusionConfigurations, diffusion),
        **details,
    }
    return tables, notices


def _check_models_listed(tables: dict[str, tuple[type, pyarrow.Table]]) -> None:
    listed = set(tables["models"][1]["model_id"].to_pylist())
    named = set()
    for table in ("token_configurations", "diffusion_configurations"):
        named.update(tables[table][1]["model_id"].to_pylist())
    unlisted = sorted(named - listed)
    if unlisted:
        raise PipelineError(
            "task files name models that index.json does not list", [f"model_id {m}" for m in unlisted]
        )


def ingest(paths: Paths, snapshot_id: str) -> IngestResult:
    tables, notices = flatten_snapshot(paths, snapshot_id)
    notices += validate_tables(tables)
    _check_models_listed(tables)
    for stale in paths.parquet_dir.glob("*.parquet"):
        stale.unlink()  # the one-file-per-table layout before snapshots were kept side by side
    for name, (_, table) in tables.items():
        with atomic_path(paths.parquet_path(name, snapshot_id)) as tmp:
            pq.write_table(table, tmp, compression="zstd")
    return IngestResult(snapshot_id, {name: table.num_rows for name, (_, table) in tables.items()}, notices)
