"""Ingest: flatten one fetched snapshot into Parquet tables, each validated by its schema in schemas/.

Each file is read once (its sha256 checked against the manifest) and decoded by msgspec into types
generated from the schemas (pipeline/upstream_json.py); whole columns go from the decoded objects
into Arrow. Nothing is written unless every table passes; a failed ingest leaves the previous tables
in place. Detail files are read in chunks, each validated and written before the next is read, so
memory stays bounded however large the snapshot.
"""

import functools
import multiprocessing
import os
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy
import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

import schemas
from pipeline.errors import PipelineError
from pipeline.fetch import TASK_NAME_PATTERN, check_snapshot_id, read_manifest
from pipeline.files import atomic_path, release_memory
from pipeline.fingerprint import data_sha256
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import load_source_card
from pipeline.upstream_json import (
    ABSENT,
    HISTOGRAM_PROBLEM,
    FileTypes,
    Histogram,
    Irregular,
    check_repeated_keys,
    columns_of,
    decode,
    decode_untyped,
    extras_text,
    file_types,
    read_objects,
)
from pipeline.validate import raise_failures, table_failures
from schemas import dictionary, measured_key

TOKEN_FAMILIES = tuple(family for family in dictionary.column("tasks", "family").isin if family != "diffusion")
TABLE_ORDER = schemas.TABLE_NAMES  # the dictionary's order
TASK_FILE_HEAD = ("task", "task_display_name", "architecture")
# A detail file's configurations are told apart as the task files' are (the staging views' repeat).
DETAIL_KEY = sorted({*measured_key("token_configurations"), *measured_key("diffusion_configurations")}
                    - {"task", "model_id"})
DETAIL_CHUNK_FILES = 500  # ~20 MB of JSON at a time


@dataclass
class IngestResult:
    snapshot_id: str
    row_counts: dict[str, int]
    notices: list[str] = field(default_factory=list)
    # Files the typed decoding refused, read object by object (unknown keys, or a value refused).
    read_by_object: list[str] = field(default_factory=list)


@functools.cache
def _types() -> FileTypes:
    return file_types()


class _VerifiedFiles:
    """The fetched files, each checked against the manifest as it is read."""

    def __init__(self, snapshot_dir: Path, manifest: dict[str, Any]) -> None:
        self.snapshot_dir = snapshot_dir
        self.digests = {entry["path"]: entry["sha256"] for entry in manifest.get("files", [])}
        self.read_names: set[str] = set()

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
        if data_sha256(data) != self.digests.get(relative):
            raise self._changed(relative)
        self.read_names.add(relative)
        return data

    def verify_rest(self) -> None:
        for relative in sorted(self.digests.keys() - self.read_names):
            self.read(relative)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise PipelineError(message)


def _table(name: str, columns: dict[str, Any]) -> pyarrow.Table:
    """A table of `name`'s schema from its columns (lists, ranges or arrays)."""
    schema = schemas.arrow_schema(name)
    return pyarrow.table({column: columns[column] for column in schema.names}, schema=schema)


def _repeats(key_columns: list[list[Any]]) -> list[int]:
    """1-based ordinal of each row among the rows before it with the same key."""
    seen: Counter[tuple[Any, ...]] = Counter()
    repeats = []
    for key in zip(*key_columns):
        seen[key] += 1
        repeats.append(seen[key])
    return repeats


# ---------------------------------------------------------------------------------------------------
# index.json and the task files.


def _read_index(files: _VerifiedFiles) -> dict[str, Any]:
    index = decode_untyped("index.json", files.read("index.json"))
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
    for task in index["tasks"]:
        _expect(task in families, f"index.json: task {task!r} has no family in architectures")
    return families


def _models_table(snapshot_id: str, index: dict[str, Any], problems: list[str]) -> pyarrow.Table | None:
    objects = [(f"index.json: models[{model_id!r}]", metadata) for model_id, metadata in index["models"].items()]
    models, extras = read_objects(objects, _types().model, "index.json", problems)
    if len(models) < len(objects):
        return None
    columns, _ = columns_of(models, _types().model)
    return _table("models", {**columns, "snapshot_id": [snapshot_id] * len(models),
                             "model_id": list(index["models"]), "extra_fields": extras})


def _read_task_file(
    snapshot_id: str, files: _VerifiedFiles, task: str, token: bool, problems: list[str]
) -> tuple[dict[str, Any], pyarrow.Table | None, bool]:
    """One task file: its fields besides the configurations, its configurations as a table (None
    when refused) and whether it was read object by object."""
    name = f"tasks/{task}.json"
    _expect((files.snapshot_dir / name).is_file(), f"{name}: missing, though index.json lists task '{task}'")
    kind = _types().token if token else _types().diffusion
    data = files.read(name)
    try:
        document = decode(name, data, _types().token_file if token else _types().diffusion_file)
        head = {key: getattr(document, key) for key in TASK_FILE_HEAD if getattr(document, key) is not ABSENT}
        rows, extras = document.configurations, [None] * len(document.configurations)
        columns, keys = columns_of(rows, kind)
        check_repeated_keys(name, data, keys + len(head) + 1)
        by_object = False
    except Irregular:
        document = decode_untyped(name, data)
        _expect(isinstance(document, dict), f"{name}: must be a JSON object")
        _expect("configurations" in document, f"{name}: missing required field 'configurations'")
        _expect(isinstance(document["configurations"], list), f"{name}: field 'configurations' must be a list")
        _expect(isinstance(document.get("task_display_name"), str), f"{name}: missing required field 'task_display_name'")
        head = {key: value for key, value in document.items() if key != "configurations"}
        objects = [
            (f"{name}: configurations[{ordinal}] (model_id={row.get('model_id') if isinstance(row, dict) else None})", row)
            for ordinal, row in enumerate(document["configurations"])
        ]
        rows, extras = read_objects(objects, kind, name, problems)
        if len(rows) < len(objects):
            return head, None, True
        columns, _ = columns_of(rows, kind)
        by_object = True
    count = len(rows)
    del data, document, rows  # the decoded objects: at 1000x a task file's take a gigabyte
    added = {"snapshot_id": [snapshot_id] * count, "task": [task] * count, "source_ordinal": range(count),
             "extra_fields": extras}
    return head, _table("token_configurations" if token else "diffusion_configurations", {**columns, **added}), by_object


def _task_row(snapshot_id: str, task: str, position: int, head: dict[str, Any], families: dict[str, str],
              labels: dict[str, str], problems: list[str], notices: list[str]) -> dict[str, Any]:
    if head.get("task", task) != task:
        problems.append(f"tasks/{task}.json: its task field says {head['task']!r}")
    architecture = head.get("architecture")
    if architecture is not None and not isinstance(architecture, str):
        problems.append(f"tasks/{task}.json: field 'architecture' must be a string")
    unknown = {key: value for key, value in head.items() if key not in TASK_FILE_HEAD}
    if task not in labels:
        notices.append(f"task {task}: no workload label in the source card; using its display name")
    return {
        "snapshot_id": snapshot_id, "task": task, "display_name": head["task_display_name"],
        "workload_label": labels.get(task, head["task_display_name"]), "family": families[task],
        "index_position": position, "file_architecture": architecture if isinstance(architecture, str) else None,
        "file_extra_fields": extras_text(unknown),
    }


def _snapshots_table(snapshot_id: str, manifest: dict[str, Any], index: dict[str, Any]) -> pyarrow.Table:
    upstream = manifest.get("upstream", {})
    files = manifest["files"]
    return _table("snapshots", {
        "snapshot_id": [snapshot_id], "source": [manifest["source"]], "retrieved": [manifest["retrieved"]],
        **{column: [upstream.get(column)] for column in ("commit", "commit_time", "commit_subject", "tasks_last_commit_date")},
        "last_updated": [index["last_updated"]], "file_count": [len(files)],
        "total_bytes": [sum(entry["size"] for entry in files)],
    })


# ---------------------------------------------------------------------------------------------------
# Detail files (models/*.json).


@dataclass
class _DetailFile:
    name: str
    document: Any  # the DetailFile struct
    extra_fields: str | None
    row_extras: list[str | None]
    by_object: bool


def _read_detail_file(name: str, data: bytes, families: dict[str, str], problems: list[str]) -> _DetailFile | None:
    """A detail file decoded, or None when refused (its problems added). Repeated keys are checked by
    the caller, for a whole chunk at once."""
    types = _types()
    try:
        document = decode(name, data, types.detail_file.struct)
        detail = _DetailFile(name, document, None, [None] * len(document.configurations), False)
    except Irregular:
        raw = decode_untyped(name, data)
        _expect(isinstance(raw, dict), f"{name}: must be a JSON object")
        _expect(isinstance(raw.get("configurations"), list), f"{name}: missing required field 'configurations' (a list)")
        head, head_extras = read_objects([(name, {**raw, "configurations": []})], types.detail_file, name, problems)
        objects = [(f"{name}: configurations[{ordinal}]", row) for ordinal, row in enumerate(raw["configurations"])]
        rows, row_extras = read_objects(objects, types.detail_row, name, problems)
        if not head or len(rows) < len(objects):
            return None
        document = msgspec.structs.replace(head[0], configurations=rows)
        detail = _DetailFile(name, document, head_extras[0], row_extras, True)
    if document.task not in families:
        problems.append(f"{name}: task {document.task!r} is not a task index.json lists")
        return None
    return detail


def _detail_tables(
    snapshot_id: str, details: list[_DetailFile], families: dict[str, str], problems: list[str]
) -> tuple[dict[str, pyarrow.Table], int]:
    """The three detail tables of a chunk of files, and how many keys the files held."""
    types = _types()
    documents = [detail.document for detail in details]
    model_columns, keys = columns_of(documents, types.detail_file)
    row_lists = [document.configurations for document in documents]
    counts = list(map(len, row_lists))
    rows = [row for row_list in row_lists for row in row_list]
    row_columns, row_keys = columns_of(rows, types.detail_row)
    file_of_row = numpy.repeat(numpy.arange(len(documents)), counts)
    repeats = _repeats([file_of_row.tolist(), *(row_columns[column] for column in DETAIL_KEY)])
    tables = {
        "model_details": _table("model_details", {
            **model_columns, "snapshot_id": [snapshot_id] * len(documents),
            "file_name": [detail.name.removeprefix("models/") for detail in details], "configuration_count": counts,
            "extra_fields": [detail.extra_fields for detail in details]}),
        "model_detail_configurations": _table("model_detail_configurations", {
            **row_columns, "snapshot_id": [snapshot_id] * len(rows),
            "task": [documents[f].task for f in file_of_row], "model_id": [documents[f].model_id for f in file_of_row],
            "detail_ordinal": [i for count in counts for i in range(count)], "repeat": repeats,
            "extra_fields": [extra for detail in details for extra in detail.row_extras]}),
        "output_length_histograms": _histograms(snapshot_id, details, problems),
    }
    return tables, keys + row_keys


def _histograms(snapshot_id: str, details: list[_DetailFile], problems: list[str]) -> pyarrow.Table:
    """One row per bin, file by file: the model's histogram first, then each configuration's."""
    histograms: list[Histogram] = []
    identity: dict[str, list[Any]] = {"task": [], "model_id": [], "scope": [], "detail_ordinal": []}
    for detail in details:
        document = detail.document
        holders = [(None, document), *enumerate(document.configurations)]
        for ordinal, holder in holders:
            histogram = holder.output_length_distribution
            if histogram is ABSENT:
                continue
            if len(histogram.bins) != len(histogram.counts) + 1:
                where = detail.name if ordinal is None else f"{detail.name}: configurations[{ordinal}]"
                problems.append(f"{where}: {HISTOGRAM_PROBLEM}")
            histograms.append(histogram)
            for column, value in (("task", document.task), ("model_id", document.model_id),
                                  ("scope", "model" if ordinal is None else "configuration"), ("detail_ordinal", ordinal)):
                identity[column].append(value)
    schema = schemas.arrow_schema("output_length_histograms")
    if problems or not histograms:
        return schema.empty_table()
    bins = pyarrow.array([h.bins for h in histograms], pyarrow.list_(pyarrow.float64()))
    counts = pyarrow.array([h.counts for h in histograms], pyarrow.list_(pyarrow.int64()))
    offsets = numpy.asarray(counts.offsets)
    parent = numpy.repeat(numpy.arange(len(histograms)), numpy.diff(offsets))
    bin_index = numpy.arange(len(parent)) - offsets[:-1][parent]
    lower = numpy.asarray(bins.offsets)[:-1][parent] + bin_index
    edges = bins.flatten().to_numpy(zero_copy_only=False)
    return _table("output_length_histograms", {
        "snapshot_id": [snapshot_id] * len(parent),
        **{column: pyarrow.array(values, schema.field(column).type).take(parent) for column, values in identity.items()},
        "bin_index": bin_index.astype(numpy.int64), "lower_edge": edges[lower], "upper_edge": edges[lower + 1],
        "count": counts.flatten(),
    })


@dataclass
class _DetailChunk:
    """What one chunk of detail files gave: its tables (validated, except model_details, whose key
    spans every chunk) and what was found on the way."""

    tables: dict[str, pyarrow.Table]
    problems: list[str]
    failures: list[str]
    notices: list[str]
    read_by_object: list[str]
    files: int


def _read_detail_chunk(
    snapshot_id: str, snapshot_dir: Path, manifest: dict[str, Any], names: list[str], families: dict[str, str]
) -> _DetailChunk:
    """Read, decode, flatten and validate a chunk of detail files (in a worker process when split)."""
    files = _VerifiedFiles(snapshot_dir, manifest)
    problems: list[str] = []
    chunk = [(name, files.read(name)) for name in names]
    details = [_read_detail_file(name, data, families, problems) for name, data in chunk]
    result = _DetailChunk({}, problems, [], [], [d.name for d in details if d is not None and d.by_object], len(names))
    if problems:
        return result
    result.tables, keys = _detail_tables(snapshot_id, [d for d in details if d is not None], families, problems)
    if sum(data.count(b":") for _, data in chunk) != keys:
        for name, data in chunk:  # which file: each is checked on its own
            decode_untyped(name, data)
    if not problems:
        result.failures, result.notices = table_failures(
            {name: table for name, table in result.tables.items() if name != "model_details"})
    release_memory()
    return result


# A worker costs about a second to start (pandera's import); with fewer detail files than this the
# whole snapshot takes less, and they are read in this process. Above it one worker per core reads
# chunks while this process reads the task files (100x: ingest 14 s in one process, 9.6 s so), at
# most two per worker in flight: finished chunks waiting for this process took 4.9 GB at 1000x.
PARALLEL_MIN_DETAIL_FILES = 2000


class _DetailChunks:
    """The detail files' chunks, handed over in order: read by worker processes when there are many,
    else here, one at a time as they are asked for."""

    def __init__(self, stack: ExitStack, snapshot_id: str, files: _VerifiedFiles, manifest: dict[str, Any],
                 names: list[str], families: dict[str, str]) -> None:
        self._jobs = iter([(snapshot_id, files.snapshot_dir, manifest, names[start:start + DETAIL_CHUNK_FILES], families)
                           for start in range(0, len(names), DETAIL_CHUNK_FILES)])
        self._running: deque[Future] = deque()
        self._pool = None
        if len(names) >= PARALLEL_MIN_DETAIL_FILES:
            cores = len(os.sched_getaffinity(0))
            # Spawned, not forked: a fork would copy this process's memory and any library threads.
            self._pool = ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn"))
            stack.callback(self._pool.shutdown, wait=True, cancel_futures=True)  # a refused chunk stops the rest
            self._in_flight = 2 * cores
            self._top_up()

    def _top_up(self) -> None:
        while len(self._running) < self._in_flight and (job := next(self._jobs, None)):
            self._running.append(self._pool.submit(_read_detail_chunk, *job))

    def ready(self, wait: bool) -> Iterator[_DetailChunk]:
        """The chunks done so far in order (with `wait`: all of them), starting more as they are taken."""
        if self._pool is None:
            yield from (_read_detail_chunk(*job) for job in self._jobs) if wait else ()
            return
        while self._running and (wait or self._running[0].done()):
            chunk = self._running.popleft().result()
            self._top_up()
            yield chunk


# ---------------------------------------------------------------------------------------------------


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
            self._schemas[name] = schemas.arrow_schema(name, stored=True)
            tmp = self._stack.enter_context(atomic_path(self._paths.parquet_path(name, self._snapshot_id)))
            self._writers[name] = self._stack.enter_context(
                pq.ParquetWriter(tmp, self._schemas[name], compression="zstd")
            )
            self.row_counts[name] = 0
        self._writers[name].write_table(table.select(self._schemas[name].names).cast(self._schemas[name]))
        self.row_counts[name] += table.num_rows


def _raise_problems(snapshot_id: str, problems: list[str]) -> None:
    if problems:
        raise PipelineError(f"snapshot {snapshot_id} has input problems: {len(problems)} problem(s)", problems[:200])


def ingest(paths: Paths, snapshot_id: str) -> IngestResult:
    """Flatten a fetched snapshot into its Parquet tables, each validated by its schema."""
    snapshot_dir = paths.raw_snapshot(check_snapshot_id(snapshot_id))
    manifest = read_manifest(snapshot_dir)
    files = _VerifiedFiles(snapshot_dir, manifest)
    files.check_present()
    index = _read_index(files)
    families = _task_families(index)
    labels = load_source_card().workload_labels
    detail_names = sorted(f"models/{path.name}" for path in (snapshot_dir / "models").glob("*.json"))
    notices: list[str] = []
    problems: list[str] = []
    failures: list[str] = []
    read_by_object: list[str] = []

    def check(tables: dict[str, pyarrow.Table]) -> bool:
        """Validate `tables`; True when they may be written (nothing refused so far)."""
        if problems:
            return False
        table_failed, table_notices = table_failures(tables)
        failures.extend(table_failed)
        notices.extend(table_notices)
        return not failures

    with ExitStack() as stack:
        writers = _TableWriters(stack, paths, snapshot_id)
        bar = stack.enter_context(progress(len(index["tasks"]) + len(detail_names), f"ingest {snapshot_id}"))
        details = _DetailChunks(stack, snapshot_id, files, manifest, detail_names, families)
        model_details, read = [], 0

        def take(chunks: Iterator[_DetailChunk]) -> None:
            nonlocal read
            for chunk in chunks:
                files.read_names.update(detail_names[read:read + chunk.files])  # verified where they were read
                read += chunk.files
                problems.extend(chunk.problems)
                failures.extend(chunk.failures)
                notices.extend(chunk.notices)
                read_by_object.extend(chunk.read_by_object)
                if not problems and not failures:  # else nothing is written, and the tables may hold holes
                    model_details.append(chunk.tables.pop("model_details"))
                    for name, table in chunk.tables.items():
                        writers.write(name, table)
                bar.update(chunk.files)

        models = _models_table(snapshot_id, index, problems)
        task_rows, named_models = [], set()
        for position, task in enumerate(index["tasks"]):
            token = families[task] in TOKEN_FAMILIES
            head, table, by_object = _read_task_file(snapshot_id, files, task, token, problems)
            if by_object:
                read_by_object.append(f"tasks/{task}.json")
            task_rows.append(_task_row(snapshot_id, task, position, head, families, labels, problems, notices))
            name = "token_configurations" if token else "diffusion_configurations"
            if table is not None and check({name: table}):
                named_models.update(pc.unique(table["model_id"]).to_pylist())
                writers.write(name, table)
            del table
            bar.update(1)
            take(details.ready(wait=False))  # written while the next task file is read: none pile up

        take(details.ready(wait=True))

        _raise_problems(snapshot_id, problems)
        small = {"snapshots": _snapshots_table(snapshot_id, manifest, index),
                 "tasks": pyarrow.Table.from_pylist(task_rows, schema=schemas.arrow_schema("tasks")),
                 "models": models,
                 "model_details": pyarrow.concat_tables(model_details) if model_details
                 else schemas.arrow_schema("model_details").empty_table()}
        check(small)
        raise_failures(failures)
        unlisted = sorted(named_models - set(models["model_id"].to_pylist()))
        if unlisted:
            raise PipelineError("task files name models that index.json does not list", [f"model_id {m}" for m in unlisted])
        files.verify_rest()
        for name, table in small.items():
            writers.write(name, table)
        for name in TABLE_ORDER:
            # An empty batch: the file exists even where a snapshot has no such rows.
            writers.write(name, schemas.arrow_schema(name).empty_table())
    return IngestResult(snapshot_id, {name: writers.row_counts[name] for name in TABLE_ORDER}, list(dict.fromkeys(notices)),
                        read_by_object)
