"""Ingest: flatten one fetched snapshot into Parquet tables, each validated by its schema in schemas/.

Nothing is written unless every table passes; a failed ingest leaves the previous tables in place.

Two readings give the same tables. The fast one (orjson, then whole columns into Arrow) takes files of
the regular shape: declared keys only, values of the declared JSON types, no key given twice. Any file
it is not sure of goes to the strict one (the standard library's parser and a row-by-row flattening),
which decides, and words every problem. Detail files are read in chunks, split across processes when
there are many.
"""

import hashlib
import itertools
import json
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy
import orjson
import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.errors import PipelineError
from pipeline.fetch import TASK_NAME_PATTERN, check_snapshot_id, read_manifest
from pipeline.files import atomic_path, load_json_strict, release_memory
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import load_source_card
from pipeline.validate import (
    arrow_schema,
    as_stored,
    json_paths,
    parquet_schema,
    raise_failures,
    table_failures,
    upstream_columns,
)
from schemas import (
    TABLES,
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
TABLE_ORDER = (
    "snapshots", "tasks", "models", "token_configurations", "diffusion_configurations", "model_details",
    "model_detail_configurations", "output_length_histograms",
)
INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclass
class IngestResult:
    snapshot_id: str
    row_counts: dict[str, int]
    notices: list[str] = field(default_factory=list)
    # Files the fast reading left to the strict one (irregular shape: unknown keys, a repeated key, ...).
    strictly_read: list[str] = field(default_factory=list)


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


# ---------------------------------------------------------------------------------------------------
# Reading files: every byte read is checked against the manifest's sha256, so each file is read once.


class _Irregular(Exception):
    """The fast reading is not sure of this input; the strict reading decides and words any problem."""


class _VerifiedFiles:
    """The fetched files, each checked against the manifest as it is read."""

    def __init__(self, snapshot_dir: Path, manifest: dict[str, Any]) -> None:
        self.snapshot_dir = snapshot_dir
        self.digests = {entry["path"]: entry["sha256"] for entry in manifest.get("files", [])}

    def check_present(self) -> None:
        for relative in self.digests:
            if not (self.snapshot_dir / relative).is_file():
                raise self._changed(relative)

    def _changed(self, relative: str) -> PipelineError:
        return PipelineError(
            f"{self.snapshot_dir / relative}: missing or changed since it was fetched; fetch the snapshot again"
        )

    def read(self, relative: str) -> bytes:
        data = (self.snapshot_dir / relative).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.digests.get(relative):
            raise self._changed(relative)
        return data

    def load_strict(self, relative: str) -> Any:
        self.read(relative)
        return load_json_strict(self.snapshot_dir / relative, relative)

    def verify_rest(self, read: set[str]) -> None:
        for relative in sorted(self.digests.keys() - read):
            self.read(relative)


@dataclass
class _Parsed:
    document: Any
    colons: int


def _parse_fast(data: bytes) -> _Parsed:
    """orjson's reading of a file, and its colons; raises _Irregular where orjson refuses the file."""
    try:
        return _Parsed(orjson.loads(data), data.count(b":"))
    except orjson.JSONDecodeError:
        raise _Irregular from None


def _keys_of(objects: list[dict[str, Any]], nested: Any = ()) -> int:
    """Keys of `objects`, and of the objects they hold under the `nested` keys."""
    total = sum(map(len, objects))
    for key in nested:
        total += sum(map(len, filter(None, map(dict.get, objects, itertools.repeat(key)))))
    return total


def _check_no_repeated_key(colons: int, keys: int) -> None:
    """Outside strings a colon only ever follows a key. The fast reading accepts a document only when
    it has counted every object in it, so as many colons as keys parsed means that no key was given
    twice (orjson keeps the last silently) and that no string holds a colon."""
    if colons != keys:
        raise _Irregular


# ---------------------------------------------------------------------------------------------------
# The fast flattening: whole columns at once, exactly what _flatten_objects gives for regular rows.

_NONE = type(None)


def _column(values: list[Any], arrow_type: pyarrow.DataType, required: bool) -> pyarrow.Array:
    """A column of parsed JSON values as _typed_value reads it; raises _Irregular where it would
    object, or where a required value is missing."""
    try:
        array = pyarrow.array(values)  # JSON types inferred in one pass: mixed ones fail here
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, OverflowError):
        raise _Irregular from None
    inferred = array.type
    if pyarrow.types.is_null(inferred):
        array = pyarrow.nulls(len(values), arrow_type)
    elif pyarrow.types.is_floating(arrow_type) and inferred in (pyarrow.float64(), pyarrow.int64()):
        # Inference reads true as 1.0 among floats; only a column holding 0 or 1 can hide one.
        if pc.any(pc.is_in(array, pyarrow.array([0, 1], inferred))).as_py() and bool in set(map(type, values)):
            raise _Irregular
        # orjson reads an integer beyond 64 bits as a float; the strict reading refuses it.
        if inferred == pyarrow.float64() and (pc.max(pc.abs(array)).as_py() or 0) >= 2**63:
            raise _Irregular
        try:
            array = array.cast(arrow_type)  # a safe cast: an integer no double holds exactly raises
        except pyarrow.ArrowInvalid:
            raise _Irregular from None
    elif inferred != arrow_type:
        raise _Irregular
    if required and array.null_count:
        raise _Irregular
    return array


def _fast_flatten(
    rows: list[Any], model: type, added: dict[str, Any], handled: frozenset[str] = frozenset()
) -> pyarrow.Table:
    """_flatten_objects for rows with declared keys only and values of the declared types; raises
    _Irregular for anything else (unknown keys, a mistyped value, a required key missing)."""
    if not set(map(type, rows)) <= {dict}:
        raise _Irregular
    schema = arrow_schema(model)
    upstream = upstream_columns(model)
    paths = json_paths(model)
    count = len(rows)
    present = set().union(*rows) if rows else set()
    if not present <= {path[0] for path in paths.values()} | handled:
        raise _Irregular  # unknown keys belong in extra_fields, which the strict reading fills
    parents: dict[str, list[Any]] = {}
    for root in {path[0] for path in paths.values() if len(path) == 2}:
        values = list(map(dict.get, rows, itertools.repeat(root)))
        children = [value for value in values if value is not None]
        if not set(map(type, children)) <= {dict}:
            raise _Irregular
        if children and not set().union(*children) <= {path[1] for path in paths.values() if path[0] == root}:
            raise _Irregular
        parents[root] = values
    columns = {}
    for name, presence in upstream.items():
        path = paths[name]
        if len(path) == 1:
            values = list(map(dict.get, rows, itertools.repeat(path[0])))
        elif len(path) == 2:
            values = [None if parent is None else parent.get(path[1]) for parent in parents[path[0]]]
        else:
            raise _Irregular
        # A required value missing or null is an error either way; the strict reading says which.
        columns[name] = _column(values, schema.field(name).type, presence == "required")
    data = {**added, **columns, "extra_fields": pyarrow.nulls(count, pyarrow.string())}
    return pyarrow.table({name: data[name] for name in schema.names}, schema=schema)


def _nested_roots(model: type) -> set[str]:
    return {path[0] for path in json_paths(model).values() if len(path) > 1}


def _repeats(key_columns: list[list[Any]]) -> list[int]:
    """1-based ordinal of each row among the rows before it with the same key."""
    seen: Counter[tuple[Any, ...]] = Counter()
    repeats = []
    for key in zip(*key_columns):
        seen[key] += 1
        repeats.append(seen[key])
    return repeats


def _with_column(table: pyarrow.Table, name: str, values: Any) -> pyarrow.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(index), pyarrow.array(values, table.schema.field(index).type))


def _fast_configurations(
    snapshot_id: str, task: str, batches: Iterator[list[Any]], model: type, configuration_key: list[str],
    nested_keys: list[int], between: Callable[[], None],
) -> pyarrow.Table:
    """_configurations_table for one regular task file whose rows come in batches. Appends to
    `nested_keys` the keys the rows hold (for _check_no_repeated_key); calls `between` after each batch."""
    pieces = []
    for rows in batches:
        placeholders = {
            "snapshot_id": pyarrow.nulls(len(rows), pyarrow.string()),
            "task": pyarrow.nulls(len(rows), pyarrow.string()),
            "source_ordinal": pyarrow.nulls(len(rows), pyarrow.int64()),
            "repeat": pyarrow.nulls(len(rows), pyarrow.int64()),
            "is_avg_output_len_derived": pyarrow.nulls(len(rows), pyarrow.bool_()),
        }
        pieces.append(_fast_flatten(rows, model, placeholders))
        nested_keys.append(_keys_of(rows, _nested_roots(model)))
        between()
    table = pyarrow.concat_tables(pieces) if pieces else arrow_schema(model).empty_table()
    count = table.num_rows
    table = _with_column(table, "snapshot_id", [snapshot_id] * count)
    table = _with_column(table, "task", [task] * count)
    table = _with_column(table, "source_ordinal", range(count))
    keys = [table[column].to_pylist() for column in configuration_key]
    table = _with_column(table, "repeat", _repeats(keys))
    if "is_avg_output_len_derived" in table.schema.names:
        table = _with_column(table, "is_avg_output_len_derived", pc.is_null(table["avg_output_len"]))
    return table


# The upstream writes its task files as json.dumps(indent=2): between two configurations stand these
# bytes, which outside a string (no string holds a raw newline) mark such a boundary or nothing valid.
_ELEMENT_BOUNDARY = b"\n    },\n    {\n"
TASK_SLICE_ROWS = 50_000


@dataclass
class _SlicedTaskFile:
    """A task file parsed in slices: the document with only its first and last configurations (the
    others cut out), and the others as byte ranges, each with the number of configurations it holds."""

    skeleton: dict[str, Any]
    ranges: list[tuple[int, int, int]]


def _slice_task_file(data: bytes) -> _SlicedTaskFile | None:
    """Cut a task file in the upstream's layout into slices, so that a large one never stands in
    memory as Python objects all at once; None when the file is not laid out so.

    Why the cut is sound: the skeleton must parse, and in it the first cut sits after an object and
    before ', {' - inside an array, as in an object a comma is followed by a key. That array holds
    the objects either side of the cut; if the skeleton's only list of objects is its configurations
    with exactly those two, each slice, parsing as an array, is a run of configurations between them.
    """
    boundaries = []
    position = data.find(_ELEMENT_BOUNDARY)
    while position != -1:
        boundaries.append(position)
        position = data.find(_ELEMENT_BOUNDARY, position + 1)
    if len(boundaries) < 2:
        return None
    closing, opening = len(b"\n    }"), len(b"\n    },\n    ")
    try:
        skeleton = orjson.loads(data[: boundaries[0] + closing] + data[boundaries[-1] + closing:])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(skeleton, dict) or set(skeleton) - KNOWN_TASK_KEYS:
        return None
    if not all(isinstance(skeleton.get(key, ""), str) for key in ("task", "task_display_name", "architecture")):
        return None
    if not (isinstance(skeleton.get("configurations"), list) and len(skeleton["configurations"]) == 2):
        return None
    cuts = list(range(0, len(boundaries) - 1, TASK_SLICE_ROWS)) + [len(boundaries) - 1]
    ranges = [
        (boundaries[first] + opening, boundaries[last] + closing, last - first) for first, last in zip(cuts, cuts[1:])
    ]
    return _SlicedTaskFile(skeleton, ranges)


def _sliced_rows(data: bytes, sliced: _SlicedTaskFile) -> Iterator[list[Any]]:
    first, last = sliced.skeleton["configurations"]
    yield [first]
    for start, end, count in sliced.ranges:
        try:
            rows = orjson.loads(b"[" + data[start:end] + b"]")
        except orjson.JSONDecodeError:
            raise _Irregular from None
        if not isinstance(rows, list) or len(rows) != count:
            raise _Irregular
        yield rows
    yield [last]


def _fast_histograms(snapshot_id: str, distributions: list[Any], identity: dict[str, list[Any]]) -> pyarrow.Table:
    """_histogram_rows for many regular distributions at once: one row per bin, in their order.
    `identity` holds the task, model_id, scope and detail_ordinal of each distribution."""
    if not distributions:
        return arrow_schema(OutputLengthHistograms).empty_table()
    if not set(map(type, distributions)) <= {dict} or not set(map(len, distributions)) <= {2}:
        raise _Irregular
    if distributions and set().union(*distributions) != {"bins", "counts"}:
        raise _Irregular
    bins = list(map(dict.get, distributions, itertools.repeat("bins")))
    counts = list(map(dict.get, distributions, itertools.repeat("counts")))
    if not set(map(type, bins)) | set(map(type, counts)) <= {list}:
        raise _Irregular
    if not set(map(type, itertools.chain.from_iterable(bins))) <= {int, float}:
        raise _Irregular
    try:
        bins_array = pyarrow.array(bins, pyarrow.list_(pyarrow.float64()))
        counts_array = pyarrow.array(counts)  # inferred: a bool or a float among the counts fails or shows
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, OverflowError):
        raise _Irregular from None
    if counts_array.type != pyarrow.list_(pyarrow.int64()):
        if counts_array.type != pyarrow.list_(pyarrow.null()):
            raise _Irregular
        counts_array = counts_array.cast(pyarrow.list_(pyarrow.int64()))
    bin_counts = numpy.diff(numpy.asarray(counts_array.offsets))
    if not numpy.array_equal(numpy.diff(numpy.asarray(bins_array.offsets)), bin_counts + 1):
        raise _Irregular
    flat_counts = counts_array.flatten()
    if len(flat_counts) and pc.min(flat_counts).as_py() < 0:
        raise _Irregular
    parent = numpy.repeat(numpy.arange(len(distributions)), bin_counts)
    bin_index = numpy.arange(len(flat_counts)) - numpy.asarray(counts_array.offsets)[:-1][parent]
    lower = numpy.asarray(bins_array.offsets)[:-1][parent] + bin_index
    edges = bins_array.flatten().to_numpy(zero_copy_only=False)
    schema = arrow_schema(OutputLengthHistograms)
    columns = {
        "snapshot_id": pyarrow.array([snapshot_id] * len(flat_counts), pyarrow.string()),
        **{name: pyarrow.array(values, schema.field(name).type).take(parent) for name, values in identity.items()},
        "bin_index": bin_index.astype(numpy.int64),
        "lower_edge": edges[lower],
        "upper_edge": edges[lower + 1],
        "count": flat_counts,
    }
    return pyarrow.table({name: columns[name] for name in schema.names}, schema=schema)


# ---------------------------------------------------------------------------------------------------
# Task files and index.json.


def _read_index(files: _VerifiedFiles) -> dict[str, Any]:
    index = files.load_strict("index.json")
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


def _check_task_document(name: str, document: Any) -> None:
    _expect(isinstance(document, dict), f"{name}: must be a JSON object")
    _expect("configurations" in document, f"{name}: missing required field 'configurations'")
    rows = document["configurations"]
    _expect(isinstance(rows, list), f"{name}: field 'configurations' must be a list")
    for ordinal, row in enumerate(rows):
        _expect(isinstance(row, dict), f"{name}: configurations[{ordinal}] must be a JSON object")
    _expect(isinstance(document.get("task_display_name"), str), f"{name}: missing required field 'task_display_name'")


KNOWN_TASK_KEYS = {"task", "task_display_name", "architecture", "configurations"}


def _read_task_file(
    snapshot_id: str, files: _VerifiedFiles, task: str, model: type, configuration_key: list[str], problems: _Problems,
    between: Callable[[], None],
) -> tuple[dict[str, Any], pyarrow.Table, bool]:
    """One task file: its document less the configurations, its configurations as a table, and
    whether the strict reading was needed."""
    name = f"tasks/{task}.json"
    _expect((files.snapshot_dir / name).is_file(), f"{name}: missing, though index.json lists task '{task}'")
    try:
        data = files.read(name)
        sliced = _slice_task_file(data)
        if sliced is not None:
            document, batches = sliced.skeleton, _sliced_rows(data, sliced)
        else:
            document = _parse_fast(data).document
            if not isinstance(document, dict) or set(document) - KNOWN_TASK_KEYS:
                raise _Irregular  # file_extra_fields keeps unknown keys as the strict reading parsed them
            if not all(isinstance(document.get(key, ""), str) for key in ("task", "task_display_name", "architecture")):
                raise _Irregular
            batches = iter([document.get("configurations")])
        try:
            _check_task_document(name, document)
        except PipelineError:
            raise _Irregular from None  # the strict reading words it, after its own checks
        row_keys: list[int] = []
        table = _fast_configurations(snapshot_id, task, batches, model, configuration_key, row_keys, between)
        _check_no_repeated_key(data.count(b":"), len(document) + sum(row_keys))
        del data
        strict = False
    except _Irregular:
        document = load_json_strict(files.snapshot_dir / name, name)
        _check_task_document(name, document)
        table = _configurations_table(snapshot_id, {task: document}, model, configuration_key, problems)
        strict = True
    return {key: value for key, value in document.items() if key != "configurations"}, table, strict


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
    return _with_column(table, "avg_output_len", filled)


# ---------------------------------------------------------------------------------------------------
# Detail files (models/*.json): read in chunks, in worker processes when there are many.


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


DetailTables = tuple[pyarrow.Table, pyarrow.Table, pyarrow.Table]


def _strict_detail_tables(
    snapshot_id: str, name: str, document: Any, families: dict[str, str], problems: _Problems
) -> DetailTables | None:
    """One detail file, row by row: its model row, its configurations and its histograms."""
    _expect(isinstance(document, dict), f"{name}: must be a JSON object")
    rows = document.get("configurations")
    _expect(isinstance(rows, list), f"{name}: missing required field 'configurations' (a list)")
    task, model_id = document.get("task"), document.get("model_id")
    if task not in families:
        problems.add(f"{name}: task {task!r} is not a task index.json lists")
        return None
    histograms: list[dict[str, Any]] = []
    if "output_length_distribution" in document:
        histograms += _histogram_rows(
            name, document["output_length_distribution"],
            {"snapshot_id": snapshot_id, "task": task, "model_id": model_id, "scope": "model", "detail_ordinal": None},
            problems,
        )
    detail_paths = json_paths(ModelDetailConfigurations)
    key_columns = TOKEN_KEY if families[task] in TOKEN_FAMILIES else DIFFUSION_KEY
    seen: Counter[tuple[Any, ...]] = Counter()
    configuration_objects = []
    added: dict[str, list[Any]] = {"task": [], "model_id": [], "detail_ordinal": [], "repeat": []}
    for ordinal, row in enumerate(rows):
        where = f"{name}: configurations[{ordinal}]"
        if not isinstance(row, dict):
            problems.add(f"{where}: must be a JSON object")
            continue
        key = tuple(_key_part(_dig(row, detail_paths[column])[1]) for column in key_columns if column in detail_paths)
        seen[key] += 1
        configuration_objects.append((where, row))
        for column, value in (("task", task), ("model_id", model_id), ("detail_ordinal", ordinal), ("repeat", seen[key])):
            added[column].append(value)
        if "output_length_distribution" in row:
            histograms += _histogram_rows(
                where, row["output_length_distribution"],
                {"snapshot_id": snapshot_id, "task": task, "model_id": model_id, "scope": "configuration",
                 "detail_ordinal": ordinal},
                problems,
            )
    details = _flatten_objects(
        [(name, document)], ModelDetails,
        {"snapshot_id": [snapshot_id], "file_name": [name.removeprefix("models/")], "configuration_count": [len(rows)]},
        problems, handled=frozenset({"configurations", "output_length_distribution"}),
    )
    configurations = _flatten_objects(
        configuration_objects, ModelDetailConfigurations,
        {"snapshot_id": [snapshot_id] * len(configuration_objects), **added},
        problems, handled=frozenset({"output_length_distribution"}),
    )
    return details, configurations, pyarrow.Table.from_pylist(histograms, schema=arrow_schema(OutputLengthHistograms))


def _fast_detail_tables(
    snapshot_id: str, documents: list[tuple[str, _Parsed | None]], families: dict[str, str]
) -> DetailTables:
    """_strict_detail_tables for many regular detail files at once; raises _Irregular otherwise."""
    models = []
    for _, parsed in documents:
        if parsed is None:
            raise _Irregular
        document = parsed.document
        if not isinstance(document, dict) or not isinstance(document.get("configurations"), list):
            raise _Irregular
        if document.get("task") not in families or not isinstance(document.get("model_id"), str):
            raise _Irregular
        models.append(document)
    histogram_key = "output_length_distribution"
    row_lists = [document["configurations"] for document in models]
    details = _fast_flatten(
        models, ModelDetails,
        {"snapshot_id": [snapshot_id] * len(models), "file_name": [name.removeprefix("models/") for name, _ in documents],
         "configuration_count": list(map(len, row_lists))},
        frozenset({"configurations", histogram_key}),
    )
    rows = list(itertools.chain.from_iterable(row_lists))
    file_of_row = numpy.repeat(numpy.arange(len(models)), list(map(len, row_lists))).tolist()
    tasks = [models[i]["task"] for i in file_of_row]
    model_ids = [models[i]["model_id"] for i in file_of_row]
    ordinals = list(itertools.chain.from_iterable(map(range, map(len, row_lists))))
    count = len(rows)
    configurations = _fast_flatten(
        rows, ModelDetailConfigurations,
        {"snapshot_id": [snapshot_id] * count, "task": tasks, "model_id": model_ids, "detail_ordinal": ordinals,
         "repeat": pyarrow.nulls(count, pyarrow.int64())},
        frozenset({histogram_key}),
    )
    detail_paths = json_paths(ModelDetailConfigurations)
    repeats: list[int] = []
    for document, row_list in zip(models, row_lists):
        start = len(repeats)
        columns = TOKEN_KEY if families[document["task"]] in TOKEN_FAMILIES else DIFFUSION_KEY
        keys = [configurations[c].slice(start, len(row_list)).to_pylist() for c in columns if c in detail_paths]
        repeats += _repeats(keys)
    configurations = _with_column(configurations, "repeat", repeats)

    # In the strict reading's order: file by file, the model's histogram first, then each configuration's.
    distributions, identity = [], {"task": [], "model_id": [], "scope": [], "detail_ordinal": []}
    for document, row_list in zip(models, row_lists):
        with_histogram = [(None, document)] if histogram_key in document else []
        with_histogram += [(ordinal, row) for ordinal, row in enumerate(row_list) if histogram_key in row]
        for ordinal, holder in with_histogram:
            distributions.append(holder[histogram_key])
            identity["task"].append(document["task"])
            identity["model_id"].append(document["model_id"])
            identity["scope"].append("model" if ordinal is None else "configuration")
            identity["detail_ordinal"].append(ordinal)
    histograms = _fast_histograms(snapshot_id, distributions, identity)
    colons = sum(parsed.colons for _, parsed in documents)
    keys = _keys_of(models, _nested_roots(ModelDetails) | {histogram_key})
    _check_no_repeated_key(colons, keys + _keys_of(rows, _nested_roots(ModelDetailConfigurations) | {histogram_key}))
    return details, configurations, histograms


@dataclass
class _ChunkResult:
    tables: dict[str, pyarrow.Table]
    problems: list[str]
    failures: list[str]
    notices: list[str]
    strictly_read: list[str]


def _read_detail_chunk(
    snapshot_id: str, snapshot_dir: str, manifest: dict[str, Any], names: list[str], families: dict[str, str]
) -> _ChunkResult:
    """Read, flatten and validate a chunk of detail files. Runs in a worker process when split."""
    files = _VerifiedFiles(Path(snapshot_dir), manifest)
    problems = _Problems()
    documents: list[tuple[str, _Parsed | None]] = []
    for name in names:
        try:
            documents.append((name, _parse_fast(files.read(name))))
        except _Irregular:
            documents.append((name, None))
    pieces: list[DetailTables] = []
    strictly_read: list[str] = []
    try:
        pieces.append(_fast_detail_tables(snapshot_id, documents, families))
    except _Irregular:
        for name, document in documents:  # file by file: fast where it can, strict where it must
            try:
                pieces.append(_fast_detail_tables(snapshot_id, [(name, document)], families))
            except _Irregular:
                strictly_read.append(name)
                strict = _strict_detail_tables(
                    snapshot_id, name, load_json_strict(files.snapshot_dir / name, name), families, problems
                )
                if strict is not None:
                    pieces.append(strict)
    documents.clear()  # the parsed JSON is the chunk's largest part; validation needs only the tables
    names_of_tables = ("model_details", "model_detail_configurations", "output_length_histograms")
    models = (ModelDetails, ModelDetailConfigurations, OutputLengthHistograms)
    tables = {
        table: pyarrow.concat_tables([piece[i] for piece in pieces]) if pieces else arrow_schema(model).empty_table()
        for i, (table, model) in enumerate(zip(names_of_tables, models))
    }
    failures: list[str] = []
    notices: list[str] = []
    if not problems.items:
        # model_details is validated whole by the caller: its key spans every chunk.
        failures, notices = table_failures(
            {name: (model, tables[name]) for name, model in zip(names_of_tables[1:], models[1:])}
        )
    release_memory()
    return _ChunkResult(tables, problems.items, failures, notices, strictly_read)


class _DetailReader:
    """Detail-file chunks on the pool, at most `in_flight` at a time so that finished ones never pile
    up in memory, each written as soon as it and those before it are done (in order, so the files
    are the same whatever the split)."""

    def __init__(
        self, pool: Executor, in_flight: int, writers: "_TableWriters", jobs: list[tuple[Any, ...]], bar: Any
    ) -> None:
        self._pool, self._in_flight, self._writers, self._bar = pool, in_flight, writers, bar
        self._waiting = list(reversed(jobs))
        self._running: list[tuple[Future, int]] = []
        self.model_details: list[pyarrow.Table] = []
        self.problems: list[str] = []
        self.failures: list[str] = []
        self.notices: list[str] = []
        self.strictly_read: list[str] = []

    def top_up(self) -> None:
        while self._waiting and len(self._running) < self._in_flight:
            job = self._waiting.pop()
            self._running.append((self._pool.submit(_read_detail_chunk, *job), len(job[3])))

    def collect(self, until_done: bool = False) -> None:
        """Write the chunks done so far (all of them with until_done) and start more."""
        while self._running and (until_done or self._running[0][0].done()):
            future, files = self._running.pop(0)
            result = future.result()
            self._bar.update(files)
            self.problems += result.problems
            self.failures += result.failures
            self.notices += result.notices
            self.strictly_read += result.strictly_read
            self.model_details.append(result.tables["model_details"])
            if not self.problems and not self.failures:  # else nothing will be written, and the tables may hold holes
                for name in ("model_detail_configurations", "output_length_histograms"):
                    self._writers.write(name, result.tables[name])
            del result
            self.top_up()


class _InlineExecutor(Executor):
    """Runs each job at once in this process: a small snapshot is not worth a worker's start-up."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to whoever asks for the result, as a pool would
            future.set_exception(error)
        return future


# A worker process costs about a second to start (pandera's import); below this many detail files
# the whole snapshot takes less.
PARALLEL_MIN_DETAIL_FILES = 2000
DETAIL_CHUNK_FILES = 500


def _chunks(names: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(names), size):
        yield names[start:start + size]


class _TableWriters:
    """One Parquet file per table, written batch by batch beside its final place and moved there only
    when every table is complete (ExitStack unwinding on an error removes them all)."""

    def __init__(self, stack: ExitStack, paths: Paths, snapshot_id: str) -> None:
        self._stack, self._paths, self._snapshot_id = stack, paths, snapshot_id
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._schemas: dict[str, pyarrow.Schema] = {}
        self.row_counts: dict[str, int] = {}

    def write(self, name: str, table: pyarrow.Table) -> None:
        if name not in self._writers:
            self._schemas[name] = parquet_schema(name, TABLES[name])
            tmp = self._stack.enter_context(atomic_path(self._paths.parquet_path(name, self._snapshot_id)))
            self._writers[name] = self._stack.enter_context(
                pq.ParquetWriter(tmp, self._schemas[name], compression="zstd")
            )
            self.row_counts[name] = 0
        self._writers[name].write_table(as_stored(table, self._schemas[name]))
        self.row_counts[name] += table.num_rows


def _check_models_listed(models: pyarrow.Table, named: set[str]) -> None:
    unlisted = sorted(named - set(models["model_id"].to_pylist()))
    if unlisted:
        raise PipelineError(
            "task files name models that index.json does not list", [f"model_id {m}" for m in unlisted]
        )


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass
class _TaskFiles:
    """What the task files give besides their configurations (handed over one file at a time)."""

    rows: list[dict[str, Any]]
    strictly_read: list[str]


def _read_task_files(
    snapshot_id: str, files: _VerifiedFiles, index: dict[str, Any], families: dict[str, str],
    labels: dict[str, str], problems: _Problems, notices: list[str], between: Callable[[], None],
    deliver: Callable[[str, type, pyarrow.Table], None],
) -> _TaskFiles:
    """The task files, one at a time, each file's configurations handed to `deliver` (table name,
    schema, table) as soon as read; calls `between` now and then (the detail files are read meanwhile)."""
    task_rows = []
    strictly_read = []
    for position, task in enumerate(index["tasks"]):
        token = families[task] in TOKEN_FAMILIES
        model, key = (TokenConfigurations, TOKEN_KEY) if token else (DiffusionConfigurations, DIFFUSION_KEY)
        document, table, strict = _read_task_file(snapshot_id, files, task, model, key, problems, between)
        between()
        if strict:
            strictly_read.append(f"tasks/{task}.json")
        if token:
            deliver("token_configurations", model, _derive_avg_output_len(table))
        else:
            deliver("diffusion_configurations", model, table)
        del table
        release_memory()
        if document.get("task", task) != task:
            problems.add(f"tasks/{task}.json: its task field says {document['task']!r}")
        architecture = document.get("architecture")
        if architecture is not None and not isinstance(architecture, str):
            problems.add(f"tasks/{task}.json: field 'architecture' must be a string")
        unknown = {key: value for key, value in document.items() if key not in KNOWN_TASK_KEYS}
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

    return _TaskFiles(task_rows, strictly_read)


def ingest(paths: Paths, snapshot_id: str, processes: int | None = None) -> IngestResult:
    """Flatten a fetched snapshot into its Parquet tables, each validated by its schema.

    `processes` splits the detail files (default: one per core when there are many, else one).
    """
    snapshot_dir = paths.raw_snapshot(check_snapshot_id(snapshot_id))
    manifest = read_manifest(snapshot_dir)
    files = _VerifiedFiles(snapshot_dir, manifest)
    files.check_present()
    index = _read_index(files)
    families = _task_families(index)
    labels = load_source_card()["workload_labels"]
    notices: list[str] = []
    problems = _Problems()
    for task in index["tasks"]:
        _expect(task in families, f"index.json: task {task!r} has no family in architectures")
    detail_names = sorted(f"models/{path.name}" for path in (snapshot_dir / "models").glob("*.json"))
    read = {"index.json", *(f"tasks/{task}.json" for task in index["tasks"]), *detail_names}
    processes = processes or (
        max(1, len(os.sched_getaffinity(0))) if len(detail_names) >= PARALLEL_MIN_DETAIL_FILES else 1
    )

    with ExitStack() as stack:
        # Spawned, not forked: a fork would copy this process's memory and any library threads.
        pool = stack.enter_context(
            ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
            if processes > 1 else _InlineExecutor()
        )
        writers = _TableWriters(stack, paths, snapshot_id)
        bar = stack.enter_context(progress(len(index["tasks"]) + len(detail_names), f"ingest {snapshot_id}"))
        chunk_size = min(DETAIL_CHUNK_FILES, max(1, -(-len(detail_names) // processes)))
        details = _DetailReader(
            pool, processes + 1, writers,
            [(snapshot_id, str(snapshot_dir), manifest, names, families) for names in _chunks(detail_names, chunk_size)],
            bar,
        )
        # The workers read detail files while this process reads the task files.
        details.top_up()

        model_objects = []
        for model_id, metadata in index["models"].items():
            _expect(isinstance(metadata, dict), f"index.json: models.{model_id} must be a JSON object")
            model_objects.append((f"index.json: models[{model_id!r}]", metadata))
        models = _flatten_objects(
            model_objects, Models,
            {"snapshot_id": [snapshot_id] * len(model_objects), "model_id": list(index["models"])},
            problems,
        )
        failures: list[str] = []
        named_models: set[str] = set()

        def deliver(name: str, model: type, table: pyarrow.Table) -> None:
            """Validate one task file's configurations and write them; nothing of it stays in memory."""
            if problems.items:
                return  # nothing will be written, and the table may hold holes
            table_failed, table_notices = table_failures({name: (model, table)})
            failures.extend(table_failed)
            notices.extend(table_notices)
            named_models.update(pc.unique(table["model_id"]).to_pylist())
            bar.update(1)
            if not failures:  # else nothing will be written, and the table may hold nulls it must not
                writers.write(name, table)

        task_files = _read_task_files(
            snapshot_id, files, index, families, labels, problems, notices, details.collect, deliver
        )
        small_tables = {
            "snapshots": (Snapshots, _snapshots_table(snapshot_id, manifest, index)),
            "tasks": (Tasks, pyarrow.Table.from_pylist(task_files.rows, schema=arrow_schema(Tasks))),
            "models": (Models, models),
        }
        if not problems.items:
            small_failures, small_notices = table_failures(small_tables)
            failures += small_failures
            notices += small_notices

        details.collect(until_done=True)
        problems.items += details.problems
        failures += details.failures
        notices += details.notices
        strictly_read = task_files.strictly_read + details.strictly_read
        model_details = (
            pyarrow.concat_tables(details.model_details) if details.model_details
            else arrow_schema(ModelDetails).empty_table()
        )
        problems.raise_if_any(f"snapshot {snapshot_id} has input problems")
        if not failures:
            failures, detail_notices = table_failures({"model_details": (ModelDetails, model_details)})
            notices += detail_notices
        raise_failures(failures)
        _check_models_listed(models, named_models)
        files.verify_rest(read)
        for name, (_, table) in small_tables.items():
            writers.write(name, table)
        writers.write("model_details", model_details)
        for name in ("token_configurations", "diffusion_configurations", "model_detail_configurations",
                     "output_length_histograms"):
            # An empty batch: the file exists even where a snapshot has no such rows.
            writers.write(name, arrow_schema(TABLES[name]).empty_table())
        for stale in paths.parquet_dir.glob("*.parquet"):
            stale.unlink()  # the one-file-per-table layout before snapshots were kept side by side
    counts = {name: writers.row_counts[name] for name in TABLE_ORDER}
    return IngestResult(snapshot_id, counts, _unique(notices), strictly_read)
