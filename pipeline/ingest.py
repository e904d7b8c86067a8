"""Ingest: flatten one fetched snapshot into Parquet tables, each validated by its schema in schemas/.

Each file is read once (its sha256 checked against the manifest) and decoded by msgspec into types
generated from the schemas (pipeline/upstream_json.py); whole columns go from the decoded objects
into Arrow. Nothing is written unless every table passes; a failed ingest leaves the previous tables
in place. The task files and chunks of detail files are read part by part, each validated and
written before more are read, so memory stays bounded however large the snapshot.
"""

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Container, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import numpy
import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

import schemas
from pipeline.errors import PipelineError, ignore_interrupts
from pipeline.archive import (
    Manifest, check_snapshot_id, commit_moment, dictionary_pattern, fetch_again, read_manifest, snapshot_ordered_at,
)
from pipeline.files import atomic_path, release_memory
from pipeline.fingerprint import data_sha256
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import load_source_card
from pipeline.upstream_json import (
    ABSENT, HISTOGRAM_PROBLEM, Histogram, Irregular, check_repeated_keys, columns_of, decode, decode_untyped,
    extras_text, file_types, read_objects,
)
from pipeline.validate import raise_failures, table_failures
from schemas import dictionary

TOKEN_FAMILIES = tuple(family for family in dictionary.column("tasks", "family").isin if family != "diffusion")
TABLE_ORDER = schemas.TABLE_NAMES  # the dictionary's order
TASK_FILE_HEAD = ("task", "task_display_name", "architecture")
DETAIL_CHUNK_FILES = 500  # ~20 MB of JSON at a time
# Task files are read in groups of at most this many bytes (a larger file alone), each table of a group
# validated once: pandera's fixed cost per call is most of what a small file's validation costs (the
# newest snapshot's seven task files, 1.4 MB: 0.23-0.33 s validated one by one, 0.06-0.08 s together).
# A group's decoded rows and their pandas copy are held at once: the bound keeps that to some tens of
# MB, and a snapshot of 100x the newest's size and more (files of 20 MB and up) is read file by file.
TASK_GROUP_BYTES = 8_000_000
# A worker costs about a second to start (pandera's import), and its parts are pickled back: at 100x
# 9 s of CPU in one process become 14 s with workers. On two cores with little else running that still
# shortens ingest (8.5 s in one process, 7.2 s with workers); with fewer detail files it never pays.
PARALLEL_MIN_DETAIL_FILES = 2000


@dataclass
class IngestResult:
    snapshot_id: str
    row_counts: dict[str, int]
    notices: list[str] = field(default_factory=list)
    # Files the typed decoding refused, read object by object (unknown keys, or a value refused).
    read_by_object: list[str] = field(default_factory=list)


@dataclass
class _Findings:
    """What reading found: input problems (after one, nothing is validated or written), validation
    failures, warnings, the files read object by object and the models index.json does not list."""

    problems: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    read_by_object: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  # models the task files name and index.json does not list

    def add(self, other: "_Findings") -> None:
        for name, values in vars(other).items():
            getattr(self, name).extend(values)

    def passes(self, tables: dict[str, pyarrow.Table]) -> bool:
        """Validate `tables`; True when they may be written (nothing refused so far)."""
        if self.problems:
            return False
        failures, notices = table_failures(tables)
        self.failures += failures
        self.notices += notices
        return not self.failures


@dataclass
class _Part:
    """What one group of task files or one chunk of detail files gave: tables validated and ready to write, and
    the rows of the tables whose key spans every part, validated whole at the end."""

    files: int
    found: _Findings
    tables: list[tuple[str, pyarrow.Table]] = field(default_factory=list)  # written in this order
    task_rows: list[dict[str, Any]] = field(default_factory=list)
    model_details: list[pyarrow.Table] = field(default_factory=list)


@dataclass(frozen=True)
class _Snapshot:
    """A fetched snapshot's files, each checked against the manifest as it is read."""

    id: str
    ordered_at: str  # ISO 8601: where it sits in the history (archive.snapshot_ordered_at)
    directory: Path
    digests: dict[str, str]  # file -> sha256
    fetch_again: str  # the command that replaces a damaged copy

    def columns(self, rows: int) -> dict[str, list[str]]:
        """The columns every table takes from the snapshot, for `rows` rows."""
        return {"snapshot_id": [self.id] * rows, "snapshot_ordered_at": [self.ordered_at] * rows}

    def changed(self, relative: str) -> PipelineError:
        return PipelineError(f"{self.directory / relative}: missing or changed since it was fetched; fetch the "
                             f"snapshot again ('{self.fetch_again}') and run again")

    def read(self, relative: str) -> bytes:
        data = (self.directory / relative).read_bytes()
        if data_sha256(data) != self.digests.get(relative):
            raise self.changed(relative)
        return data


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise PipelineError(message)


def _table(name: str, columns: dict[str, Any]) -> pyarrow.Table:
    """A table of `name`'s schema from its columns (lists, ranges or arrays)."""
    schema = schemas.arrow_schema(name)
    return pyarrow.table({column: columns[column] for column in schema.names}, schema=schema)


# ---------------------------------------------------------------------------------------------------
# index.json and the task files.


def _untyped_object(name: str, data: bytes, required: dict[str, type]) -> dict[str, Any]:
    """A file as JSON values, checked to be an object with the `required` fields of their types."""
    document = decode_untyped(name, data)
    _expect(isinstance(document, dict), f"{name}: must be a JSON object")
    for key, kind in required.items():
        _expect(key in document, f"{name}: missing required field '{key}'")
        _expect(isinstance(document[key], kind), f"{name}: field '{key}' must be a JSON {kind.__name__}")
    return document


def _read_index(snapshot: _Snapshot) -> tuple[dict[str, Any], dict[str, str]]:
    """index.json, checked, and each task's family."""
    index = _untyped_object("index.json", snapshot.read("index.json"),
                            {"models": dict, "tasks": list, "architectures": dict, "last_updated": str})
    for task in index["tasks"]:
        # A task name becomes a file and folder name: only a closed alphabet may reach a path.
        _expect(isinstance(task, str) and bool(dictionary_pattern("tasks", "task").match(task)),
                f"index.json: task {task!r} is not a task name (lower-case letters, digits and '-')")
    repeated = sorted({task for task in index["tasks"] if index["tasks"].count(task) > 1})
    _expect(not repeated, f"index.json: tasks listed more than once: {', '.join(repeated)}")
    families = {}
    for family, tasks in index["architectures"].items():
        _expect(isinstance(tasks, list), f"index.json: architectures.{family} must be a list of tasks")
        families.update({task: family for task in tasks})
    for task in index["tasks"]:
        _expect(task in families, f"index.json: task {task!r} has no family in architectures")
    return index, families


def _read_task_file(
    snapshot: _Snapshot, task: str, table: str, found: _Findings
) -> tuple[dict[str, Any], pyarrow.Table | None]:
    """One task file: its fields besides the configurations, and its configurations as a table (None
    when refused)."""
    name = f"tasks/{task}.json"
    _expect((snapshot.directory / name).is_file(), f"{name}: missing, though index.json lists task '{task}'")
    kind = file_types()[table]
    data = snapshot.read(name)
    try:
        document = decode(name, data, kind.file)
        head = {key: getattr(document, key) for key in TASK_FILE_HEAD if getattr(document, key) is not ABSENT}
        rows, extras = document.configurations, [None] * len(document.configurations)
        columns, keys = columns_of(rows, kind)
        check_repeated_keys(name, data, keys + len(head) + 1)
    except Irregular:
        document = _untyped_object(name, data, {"configurations": list})
        _expect(isinstance(document.get("task_display_name"), str),
                f"{name}: missing required field 'task_display_name'")
        found.read_by_object.append(name)
        head = {key: value for key, value in document.items() if key != "configurations"}
        entries = document["configurations"]
        ids = [entry.get("model_id") if isinstance(entry, dict) else None for entry in entries]
        objects = [(f"{name}: configurations[{i}] (model_id={ids[i]})", entry) for i, entry in enumerate(entries)]
        rows, extras = read_objects(objects, kind, name, found.problems)
        if len(rows) < len(objects):
            return head, None
        columns, _ = columns_of(rows, kind)
    count = len(rows)
    del data, document, rows  # the decoded objects: at 1000x a task file's take a gigabyte
    return head, _table(table, {**columns, **snapshot.columns(count), "task": [task] * count,
                                "source_ordinal": range(count), "extra_fields": extras})


def _read_task(snapshot: _Snapshot, position: int, task: str, family: str, label: str | None,
               part: _Part) -> tuple[str, pyarrow.Table | None]:
    """A task file: its row of the tasks table and what it found, added to `part`; its configurations'
    table (None when refused), not yet validated, under its table's name."""
    found = part.found
    table_name = "token_configurations" if family in TOKEN_FAMILIES else "diffusion_configurations"
    head, table = _read_task_file(snapshot, task, table_name, found)
    if head.get("task", task) != task:
        found.problems.append(f"tasks/{task}.json: its task field says {head['task']!r}")
    architecture = head.get("architecture")
    if architecture is not None and not isinstance(architecture, str):
        found.problems.append(f"tasks/{task}.json: field 'architecture' must be a string")
    if label is None:
        found.notices.append(f"task {task}: no workload label in the source card; using its display name")
    part.task_rows.append({
        "snapshot_id": snapshot.id, "snapshot_ordered_at": snapshot.ordered_at, "task": task,
        "display_name": head["task_display_name"],
        "workload_label": head["task_display_name"] if label is None else label, "family": family,
        "index_position": position, "file_architecture": architecture if isinstance(architecture, str) else None,
        "file_extra_fields": extras_text({key: value for key, value in head.items() if key not in TASK_FILE_HEAD}),
    })
    return table_name, table


def _read_tasks(snapshot: _Snapshot, tasks: list[tuple[int, str, str, str | None]],
                listed_models: Container[str]) -> _Part:
    """A group of task files (position, task, family, workload label): their rows of the tasks table and,
    when they pass, their configurations' tables, each table validated once for the group."""
    part = _Part(len(tasks), _Findings())
    read = [(name, table) for name, table in (_read_task(snapshot, position, task, family, label, part)
                                               for position, task, family, label in tasks) if table is not None]
    # Validated together, written file by file: the Parquet files keep a row group per task file.
    together = {name: pyarrow.concat_tables([table for other, table in read if other == name])
                for name in dict.fromkeys(name for name, _ in read)}
    if together and part.found.passes(together):
        part.tables = read
        part.found.unlisted += [model for table in together.values() for model in pc.unique(table["model_id"]).to_pylist()
                                if model not in listed_models]
    return part


def _task_groups(tasks: list[str], sizes: dict[str, int]) -> list[list[tuple[int, str]]]:
    """The tasks with their positions, in order, cut into groups of at most TASK_GROUP_BYTES of task files
    (a larger one alone)."""
    groups: list[list[tuple[int, str]]] = []
    total = 0
    for position, task in enumerate(tasks):
        size = sizes.get(f"tasks/{task}.json", 0)
        if not groups or total + size > TASK_GROUP_BYTES:
            groups.append([])
            total = 0
        groups[-1].append((position, task))
        total += size
    return groups


# ---------------------------------------------------------------------------------------------------
# Detail files (models/*.json).


@dataclass
class _DetailFile:
    name: str
    document: Any  # the DetailFile struct
    extra_fields: str | None
    row_extras: list[str | None]


def _read_detail_file(name: str, data: bytes, families: dict[str, str], found: _Findings) -> _DetailFile | None:
    """A detail file decoded, or None when refused (its problems added). Repeated keys are checked by
    the caller, for a whole chunk at once."""
    types = file_types()
    try:
        document = decode(name, data, types["model_details"].struct)
        detail = _DetailFile(name, document, None, [None] * len(document.configurations))
    except Irregular:
        raw = _untyped_object(name, data, {"configurations": list})
        found.read_by_object.append(name)
        head, head_extras = read_objects([(name, {**raw, "configurations": []})], types["model_details"], name,
                                         found.problems)
        objects = [(f"{name}: configurations[{ordinal}]", row) for ordinal, row in enumerate(raw["configurations"])]
        rows, row_extras = read_objects(objects, types["model_detail_configurations"], name, found.problems)
        if not head or len(rows) < len(objects):
            return None
        document = msgspec.structs.replace(head[0], configurations=rows)
        detail = _DetailFile(name, document, head_extras[0], row_extras)
    if document.task not in families:
        found.problems.append(f"{name}: task {document.task!r} is not a task index.json lists")
        return None
    return detail


def _histograms(snapshot: _Snapshot, details: list[_DetailFile], problems: list[str]) -> pyarrow.Table:
    """One row per bin, file by file: the model's histogram first, then each configuration's."""
    histograms: list[Histogram] = []
    owners: list[tuple[str, str, str, int | None]] = []  # task, model_id, scope, detail_ordinal
    for detail in details:
        document = detail.document
        for ordinal, holder in [(None, document), *enumerate(document.configurations)]:
            if (histogram := holder.output_length_distribution) is ABSENT:
                continue
            if len(histogram.bins) != len(histogram.counts) + 1:
                where = detail.name if ordinal is None else f"{detail.name}: configurations[{ordinal}]"
                problems.append(f"{where}: {HISTOGRAM_PROBLEM}")
            histograms.append(histogram)
            owners.append((document.task, document.model_id, "model" if ordinal is None else "configuration", ordinal))
    schema = schemas.arrow_schema("output_length_histograms")
    if problems or not histograms:
        return schema.empty_table()
    bins = pyarrow.array([h.bins for h in histograms], pyarrow.list_(pyarrow.float64()))
    counts = pyarrow.array([h.counts for h in histograms], pyarrow.list_(pyarrow.int64()))
    parent = pc.list_parent_indices(counts).to_numpy()
    bin_index = numpy.arange(len(parent)) - numpy.asarray(counts.offsets)[parent]
    lower = numpy.asarray(bins.offsets)[parent] + bin_index
    edges = bins.flatten().to_numpy(zero_copy_only=False)
    return _table("output_length_histograms", {
        **snapshot.columns(len(parent)),
        **{column: pyarrow.array(values, schema.field(column).type).take(parent)
           for column, values in zip(("task", "model_id", "scope", "detail_ordinal"), zip(*owners))},
        "bin_index": bin_index.astype(numpy.int64), "lower_edge": edges[lower], "upper_edge": edges[lower + 1],
        "count": counts.flatten(),
    })


def _read_detail_chunk(snapshot: _Snapshot, names: list[str], families: dict[str, str]) -> _Part:
    """Read, decode, flatten and validate a chunk of detail files into the three detail tables;
    model_details is validated at the end, its key spanning every chunk."""
    found = _Findings()
    chunk = [(name, snapshot.read(name)) for name in names]
    details = [_read_detail_file(name, data, families, found) for name, data in chunk]
    if found.problems:
        return _Part(len(names), found)
    types = file_types()
    documents = [detail.document for detail in details]
    model_columns, keys = columns_of(documents, types["model_details"])
    counts = [len(document.configurations) for document in documents]
    rows = [row for document in documents for row in document.configurations]
    row_columns, row_keys = columns_of(rows, types["model_detail_configurations"])
    if sum(data.count(b":") for _, data in chunk) != keys + row_keys:
        for name, data in chunk:  # which file: each is checked on its own
            decode_untyped(name, data)
    file_of_row = numpy.repeat(numpy.arange(len(documents)), counts)
    model_details = _table("model_details", {
        **model_columns, **snapshot.columns(len(documents)),
        "file_name": [detail.name.removeprefix("models/") for detail in details], "configuration_count": counts,
        "extra_fields": [detail.extra_fields for detail in details]})
    tables = {
        "model_detail_configurations": _table("model_detail_configurations", {
            **row_columns, **snapshot.columns(len(rows)),
            "task": [documents[f].task for f in file_of_row], "model_id": [documents[f].model_id for f in file_of_row],
            "detail_ordinal": [i for count in counts for i in range(count)],
            "extra_fields": [extra for detail in details for extra in detail.row_extras]}),
        "output_length_histograms": _histograms(snapshot, details, found.problems),
    }
    if not found.problems:
        found.passes(tables)
    release_memory()
    return _Part(len(names), found, list(tables.items()), model_details=[model_details])


def _in_order(stack: ExitStack, jobs: list[Callable[[], _Part]], parallel: bool) -> Iterator[_Part]:
    """Each job's part, in order: done here one at a time as they are asked for, or (`parallel`) by
    one worker process per core, at most two per worker in flight (finished parts waiting for this
    process took 4.9 GB at 1000x)."""
    if not parallel:
        yield from (job() for job in jobs)
        return
    cores = len(os.sched_getaffinity(0))
    # Spawned, not forked: a fork would copy this process's memory and any library threads.
    pool = ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn"),
                               initializer=ignore_interrupts)
    stack.callback(pool.shutdown, wait=True, cancel_futures=True)  # an error stops the rest
    running: deque[Future[_Part]] = deque()
    for job in jobs:
        running.append(pool.submit(job))
        if len(running) == 2 * cores:
            yield running.popleft().result()
    while running:
        yield running.popleft().result()


# ---------------------------------------------------------------------------------------------------


class _TableWriters:
    """One Parquet file per table, written batch by batch beside its final place and moved there only
    when every table is complete (ExitStack unwinding on an error removes them all)."""

    def __init__(self, stack: ExitStack, paths: Paths, snapshot_id: str) -> None:
        self._stack, self._paths, self._snapshot_id = stack, paths, snapshot_id
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.row_counts: dict[str, int] = {}

    def write(self, name: str, table: pyarrow.Table) -> None:
        schema = schemas.arrow_schema(name, stored=True)
        if name not in self._writers:
            tmp = self._stack.enter_context(atomic_path(self._paths.parquet_path(name, self._snapshot_id)))
            self._writers[name] = self._stack.enter_context(pq.ParquetWriter(tmp, schema, compression="zstd"))
            self.row_counts[name] = 0
        self._writers[name].write_table(table.select(schema.names).cast(schema))
        self.row_counts[name] += table.num_rows


def ingest(paths: Paths, snapshot_id: str) -> IngestResult:
    """Flatten a fetched snapshot into its Parquet tables, each validated by its schema. A problem that names
    a file by its place in the snapshot (tasks/gpqa.json) is reported naming the snapshot and where it was
    fetched from too: a history ingests many, and the name alone does not say which is at fault."""
    directory = paths.raw_snapshot(check_snapshot_id(snapshot_id))
    manifest = read_manifest(directory)
    try:
        return _ingest(paths, snapshot_id, directory, manifest)
    except PipelineError as error:
        message, *_ = error.args
        if snapshot_id in message:
            raise
        raise PipelineError(f"snapshot {snapshot_id} (from {manifest['source']}): {message}", error.details) from None


def _ingest(paths: Paths, snapshot_id: str, directory: Path, manifest: Manifest) -> IngestResult:
    commit_time = manifest["upstream"].get("commit_time")
    ordered_at = snapshot_ordered_at(commit_moment(commit_time) if commit_time else None,
                                     date.fromisoformat(manifest["retrieved"]))
    snapshot = _Snapshot(snapshot_id, ordered_at.isoformat(), directory,
                         {entry["path"]: entry["sha256"] for entry in manifest["files"]}, fetch_again(paths, snapshot_id))
    for relative in snapshot.digests:
        if not (directory / relative).is_file():
            raise snapshot.changed(relative)
    index, families = _read_index(snapshot)
    labels = load_source_card().workload_labels
    detail_names = sorted(f"models/{path.name}" for path in (directory / "models").glob("*.json"))
    found = _Findings()
    model_type = file_types()["models"]
    models, model_extras = read_objects(
        [(f"index.json: models[{model_id!r}]", metadata) for model_id, metadata in index["models"].items()],
        model_type, "index.json", found.problems)
    sizes = {entry["path"]: entry["size"] for entry in manifest["files"]}
    jobs = [partial(_read_tasks, snapshot, [(position, task, families[task], labels.get(task)) for position, task in group],
                    index["models"]) for group in _task_groups(index["tasks"], sizes)]
    jobs += [partial(_read_detail_chunk, snapshot, detail_names[start:start + DETAIL_CHUNK_FILES], families)
             for start in range(0, len(detail_names), DETAIL_CHUNK_FILES)]
    task_rows, model_details = [], []

    with ExitStack() as stack:
        writers = _TableWriters(stack, paths, snapshot_id)
        bar = stack.enter_context(progress(len(index["tasks"]) + len(detail_names), f"ingest {snapshot_id}"))
        for part in _in_order(stack, jobs, parallel=len(detail_names) >= PARALLEL_MIN_DETAIL_FILES):
            found.add(part.found)
            task_rows += part.task_rows
            if not found.problems and not found.failures:  # else nothing is written, and the tables may hold holes
                model_details += part.model_details
                for name, table in part.tables:
                    writers.write(name, table)
            bar.update(part.files)
            del part  # not held while the next part is read

        if found.problems:
            raise PipelineError(f"snapshot {snapshot_id} has input problems: {len(found.problems)} problem(s)",
                                found.problems[:200])
        snapshot_row = {**manifest.get("upstream", {}), "snapshot_id": snapshot_id,
                        "snapshot_ordered_at": snapshot.ordered_at, "source": manifest["source"],
                        "retrieved": manifest["retrieved"], "last_updated": index["last_updated"],
                        "file_count": len(manifest["files"]), "total_bytes": sum(e["size"] for e in manifest["files"])}
        small = {
            "snapshots": pyarrow.Table.from_pylist([snapshot_row], schema=schemas.arrow_schema("snapshots")),
            "tasks": pyarrow.Table.from_pylist(task_rows, schema=schemas.arrow_schema("tasks")),
            "models": _table("models", {**columns_of(models, model_type)[0], **snapshot.columns(len(models)),
                                        "model_id": list(index["models"]), "extra_fields": model_extras}),
            "model_details": pyarrow.concat_tables(model_details) if model_details
            else schemas.arrow_schema("model_details").empty_table(),
        }
        found.passes(small)
        raise_failures(found.failures)
        if found.unlisted:
            raise PipelineError("task files name models that index.json does not list",
                                [f"model_id {model_id}" for model_id in sorted(set(found.unlisted))])
        read = {"index.json", *(f"tasks/{task}.json" for task in index["tasks"]), *detail_names}
        for relative in sorted(snapshot.digests.keys() - read):
            snapshot.read(relative)
        for name, table in small.items():
            writers.write(name, table)
        for name in TABLE_ORDER:
            # An empty batch: the file exists even where a snapshot has no such rows.
            writers.write(name, schemas.arrow_schema(name).empty_table())
    return IngestResult(snapshot_id, {name: writers.row_counts[name] for name in TABLE_ORDER},
                        list(dict.fromkeys(found.notices)), found.read_by_object)
