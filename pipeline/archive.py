"""The raw archive: OUT/raw/<snapshot-id>/ holds one fetched snapshot's files with manifest.json (what was
fetched, from where, and when), OUT/raw/LATEST names the snapshot the last fetch delivered, and
OUT/raw/.stat-cache.json lets a local folder fetched before be vouched for without reading it. The
archive belongs to OUT: its files are copies, never links, and a published snapshot's files never
change; content that differs from what was published under the same id is refused, naming the files.
A fetch (pipeline/fetch.py) writes a snapshot's files into a staging folder and keeps them with `store`;
ingest and the refresh read the archive through the functions here."""

import functools
import os
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import TypedDict

import msgspec

from pipeline import jsontext
from pipeline.errors import NEXT_STEP, PipelineError, command_name, out_option, shown
from pipeline.files import read_typed, replace_directory, sweep_leftovers, write_bytes_atomic, write_json_atomic
from pipeline.fingerprint import data_sha256, file_sha256
from pipeline.paths import Paths
from pipeline.settings import is_url, time_problem

MANIFEST = "manifest.json"
# Written beside the shared snapshots (not by the upstream): the facts of the commit a folder holds.
COMMIT_FACTS = "snapshot.json"
# Per local source folder and file: size, mtime and ctime in ns, inode and sha256, as git's index keeps
# them. When every file's entry matches, none is read; otherwise (cp -a, rsync -a, an edit in place, a
# git checkout: each gives a new ctime or inode) all are copied and hashed. An entry touched within
# RACY_WINDOW_NS of writing the cache could change again within the same timestamp tick: it is left out
# (git's rule).
STAT_CACHE = ".stat-cache.json"
StatCache = dict[str, dict[str, tuple[int, int, int, int, str]]]
RACY_WINDOW_NS = 2_000_000_000


class FileEntry(TypedDict):
    path: str
    sha256: str
    size: int


class Manifest(TypedDict):
    snapshot_id: str
    source: str
    retrieved: str
    upstream: dict[str, str]  # the commit facts, where known
    files: list[FileEntry]


@dataclass(frozen=True)
class FetchResult:
    snapshot_id: str
    directory: Path
    file_count: int
    total_bytes: int
    changed: bool
    content_sha256: str  # content_digest: what the snapshot is, whatever its id
    notices: tuple[str, ...] = ()


def _result(target: Path, upstream: Mapping[str, str], files: list[FileEntry], changed: bool,
            notices: tuple[str, ...] = ()) -> FetchResult:
    return FetchResult(target.name, target, len(files), sum(entry["size"] for entry in files), changed,
                       content_digest(upstream, files), notices)


@functools.cache
def dictionary_pattern(table: str, column: str) -> re.Pattern[str]:
    """A column's alphabet as the dictionary declares it (task names and snapshot ids become paths)."""
    from schemas import dictionary

    return re.compile(dictionary.table_columns(table)[column]["matches"])


def content_digest(upstream: Mapping[str, str], files: list[FileEntry]) -> str:
    """sha256 of the upstream facts and files as json.dumps(sort_keys=True) writes them (non-ASCII as
    \\u escapes): the form the ids of snapshots without a commit have always been made from."""
    return data_sha256(jsontext.dumps({"upstream": upstream, "files": files}, indent=None, sort_keys=True))


def checked_time(text: str, what: str) -> str:
    """`text` if it is a commit time with its zone (time_problem); else an error naming `what`."""
    if (problem := time_problem(text)) is not None:
        raise PipelineError(f"{what} {text!r} {problem}")
    return text


def commit_moment(commit_time: str) -> datetime:
    """An ISO 8601 commit time as an aware UTC time (one without an offset is taken as UTC)."""
    moment = datetime.fromisoformat(commit_time)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def snapshot_ordered_at(commit_time: datetime | None, retrieved: date) -> datetime:
    """Where a snapshot sits in the history, as an aware UTC time: its commit time, or, where the commit is
    unknown, midnight UTC of the day it was first retrieved. The snapshots' Parquet files carry it
    (pipeline.paths.order_column); snapshot_history orders by the same facts, then by snapshot id."""
    return commit_time.astimezone(timezone.utc) if commit_time else datetime.combine(retrieved, time(), timezone.utc)


def with_commit_time(upstream: dict[str, str], commit_time: str | None, source: str) -> dict[str, str]:
    """The upstream facts with a commit time given on the command line, which must not contradict them."""
    if commit_time is None:
        return upstream
    if upstream.get("commit_time") not in (None, commit_time):
        raise PipelineError(f"{source}: --commit-time {commit_time} contradicts its snapshot.json "
                            f"({upstream['commit_time']})")
    return {**upstream, "commit_time": checked_time(commit_time, "--commit-time")}


def snapshot_id_of(upstream: Mapping[str, str], files: list[FileEntry]) -> str:
    """The UTC date of the commit and its short hash: the same id for a commit whether its facts come
    from GitHub's API (times in UTC) or a folder's snapshot.json (times in the committer's zone)."""
    if (commit := upstream.get("commit")) and upstream.get("commit_time"):
        return f"{commit_moment(upstream['commit_time']).date().isoformat()}-{commit[:7]}"
    return commit[:7] if commit else f"local-{content_digest(upstream, files)[:12]}"


def check_snapshot_id(snapshot_id: str) -> str:
    if not dictionary_pattern("snapshots", "snapshot_id").match(snapshot_id):
        raise PipelineError(f"snapshot id {shown(snapshot_id, quoted=True)} is not a snapshot id (letters, digits, '.', '_', '-')")
    return snapshot_id


def read_manifest(snapshot_dir: Path) -> Manifest:
    if not (snapshot_dir / MANIFEST).is_file():
        raise PipelineError(f"snapshot {snapshot_dir.name} has not been fetched; {NEXT_STEP}")
    return read_typed(snapshot_dir / MANIFEST, Manifest)


def latest_snapshot_id(paths: Paths) -> str:
    if not paths.latest_snapshot_pointer.is_file():
        raise PipelineError(f"no snapshot has been fetched yet; {NEXT_STEP}")
    return check_snapshot_id(paths.latest_snapshot_pointer.read_text(encoding="utf-8").strip())


def _point_latest_at(paths: Paths, snapshot_id: str) -> None:
    write_bytes_atomic(paths.latest_snapshot_pointer, f"{snapshot_id}\n".encode())


def read_stat_cache(paths: Paths) -> StatCache:
    try:
        return read_typed(paths.raw_dir / STAT_CACHE, StatCache)
    except (OSError, PipelineError):
        return {}


def write_stat_cache(paths: Paths, cache: StatCache) -> None:
    write_json_atomic(paths.raw_dir / STAT_CACHE, cache)


def stat_key(stat: os.stat_result, path: Path, max_file_bytes: int) -> tuple[int, int, int, int]:
    """What the stat cache compares of a file: size, mtime, ctime and inode (a file over the cap refused)."""
    if stat.st_size > max_file_bytes:
        raise PipelineError(f"{path}: larger than the size cap of {max_file_bytes} bytes")
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


# What index.json and the task files name: the files a whole snapshot holds.
_Index = msgspec.defstruct("_Index", [("tasks", list[str])])
_TaskFile = msgspec.defstruct("_TaskFile", [("configurations", list[msgspec.defstruct("_Row", [("model_id", str)])])])


def named_files(folder: Path) -> Iterator[str]:
    """The files a snapshot folder's index.json names: each task's file (tasks/<task>.json) and each of
    its models' file (models/<model>__<task>.json, from the rows of the task file, when it is there)."""
    from schemas.rules import MODEL_ID_PATTERN

    tasks = read_typed(folder / "index.json", _Index, "index.json").tasks
    if not all(dictionary_pattern("tasks", "task").match(task) for task in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in tasks:
        yield (name := f"tasks/{task}.json")
        if not (folder / name).is_file():
            continue
        for model_id in sorted({row.model_id for row in read_typed(folder / name, _TaskFile, name).configurations}):
            if not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            yield f"models/{model_id.replace('/', '__')}__{task}.json"


def archive_problems(paths: Paths, snapshot_id: str, *, full: bool) -> Iterator[str]:
    """Everything wrong with the archived copy OUT/raw/<snapshot_id> against its manifest, one sentence per
    file, lazily (archive_damage stops at the first): a file missing or of another size (the cheap check, by
    stat), or, when `full`, of another sha256, or (fetched from a URL, where the commit's tree is the whole
    snapshot) lacking a file its index.json names."""
    directory = paths.raw_snapshot(snapshot_id)
    try:
        manifest = read_manifest(directory)
    except PipelineError:
        yield "its manifest is missing or unreadable"
        return
    for entry in manifest["files"]:
        try:
            size = (directory / entry["path"]).stat().st_size
        except OSError:
            yield f"{entry['path']} is missing"
            continue
        if size != entry["size"]:
            yield f"{entry['path']} has {size:,} bytes, fetched with {entry['size']:,}"
        elif full and file_sha256(directory / entry["path"]) != entry["sha256"]:
            yield f"{entry['path']} differs from what was fetched (sha256)"
    if full and is_url(manifest["source"]):
        held = {entry["path"] for entry in manifest["files"]}
        try:
            missing = [name for name in named_files(directory) if name not in held]
        except PipelineError as error:
            yield str(error)
            return
        yield from (f"it lacks {name}, which its index.json names" for name in missing)


def archive_damage(paths: Paths, snapshot_id: str, *, full: bool) -> str | None:
    """The first of archive_problems, or None when the archived copy is whole."""
    return next(archive_problems(paths, snapshot_id, full=full), None)


def fetch_again(paths: Paths, snapshot_id: str, known: tuple[str, str | None] | None = None) -> str:
    """The command that fetches an archived snapshot again, replacing a damaged copy, as it can be typed here.
    `known`: the snapshot's source and commit as published, for a copy whose manifest is gone."""
    try:
        manifest = read_manifest(paths.raw_snapshot(snapshot_id))
        source, commit = manifest["source"], manifest["upstream"].get("commit")
    except PipelineError:
        if known is None:
            return f"{command_name()} fetch --source FOLDER_OR_URL{out_option(paths.out)}"
        source, commit = known
    if is_url(source) and commit:
        return f"{command_name()} fetch --commit {commit}{out_option(paths.out)}"
    return f"{command_name()} fetch --source {shlex.quote(source)}{out_option(paths.out)}"


def check_archive(paths: Paths, snapshot_ids: list[str]) -> None:
    """Refuse, before any of them is ingested, snapshots whose archived copy is not whole (the full check),
    naming the command that fetches each again."""
    for snapshot_id in snapshot_ids:
        if (damage := archive_damage(paths, snapshot_id, full=True)) is not None:
            raise PipelineError(f"{paths.raw_snapshot(snapshot_id)}: {damage}, so it cannot be ingested again; "
                                f"fetch it again ('{fetch_again(paths, snapshot_id)}') and run again")


def held_already(paths: Paths, snapshot_id: str, upstream: dict[str, str], files: list[FileEntry],
                 full: bool = False) -> bool:
    """True if OUT/raw already holds exactly this snapshot, whole (archive_damage, cheap or `full`; a
    damaged copy is replaced). Different content under the id of a published snapshot is refused; under
    an unpublished one (a failed earlier fetch) it is replaced."""
    try:
        previous = read_manifest(paths.raw_snapshot(snapshot_id))
    except PipelineError:  # not fetched, or a manifest that cannot be read: the copy is fetched as if it were not
        return False
    if previous["files"] == files and previous["upstream"] == upstream:
        return archive_damage(paths, snapshot_id, full=full) is None
    if previous["upstream"] == upstream and archive_damage(paths, snapshot_id, full=True) is not None:
        return False  # a damaged or incomplete copy of the same commit: replaced by a whole one
    published = Paths(paths.out)
    if snapshot_id in published.parquet_files("snapshots"):
        before, now = ({entry["path"]: entry for entry in listed} for listed in (previous["files"], files))
        differing = [COMMIT_FACTS] if previous["upstream"] != upstream else []
        differing += sorted(path for path in before.keys() | now.keys() if before.get(path) != now.get(path))
        named = ", ".join(differing[:10]) + (f" and {len(differing) - 10} more" if len(differing) > 10 else "")
        raise PipelineError(
            f"these files differ from snapshot {snapshot_id} as it was published: {named}. A published snapshot "
            f"never changes: to ingest changed data, give it its own identity (remove or edit {COMMIT_FACTS})")
    return False


@contextmanager
def staging_folder(paths: Paths) -> Iterator[Path]:
    """A private folder in OUT/raw for a fetch to write a snapshot's files into before `store` keeps them;
    removed afterwards, as are those a stopped run left (the fetch holds OUT's lock)."""
    staging = paths.raw_dir / f".staging-{os.getpid()}"
    for leftover in paths.raw_dir.glob(".staging-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    sweep_leftovers(paths.raw_dir)
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def store(paths: Paths, staging: Path, upstream: dict[str, str], files: list[FileEntry], *, source: str,
          origin: str, full_check: bool = False) -> FetchResult:
    """Keep a fetched snapshot in OUT/raw/<snapshot-id>/: its upstream facts, its files' entries and where it
    came from (`origin`, as the manifest records it), with whatever files the archive lacks written into
    `staging` (staging_folder). An unchanged snapshot is left as it was, unless its copy is damaged
    (archive_damage: by stat, or `full_check` by sha256 too); LATEST names it either way."""
    target = paths.raw_snapshot(snapshot_id := snapshot_id_of(upstream, files))
    if changed := not held_already(paths, snapshot_id, upstream, files, full_check):
        write_json_atomic(staging / MANIFEST, Manifest(
            snapshot_id=snapshot_id, source=origin, retrieved=datetime.now(timezone.utc).date().isoformat(),
            upstream=upstream, files=files))
        replace_directory(staging, target)
    _point_latest_at(paths, snapshot_id)
    notices = () if upstream.get("commit_time") else (
        f"{source} has no commit time (no snapshot.json): it is snapshot {snapshot_id}, placed in the history by "
        f"the day it was first fetched, {read_manifest(target)['retrieved']}. To place it by its upstream commit, "
        "give --commit-time (make COMMIT_TIME=2026-02-16T09:48:29Z) or a snapshot.json with commit_time beside its "
        "files",)
    return _result(target, upstream, files, changed, notices)


def held_snapshot(paths: Paths, snapshot_id: str) -> FetchResult:
    """A snapshot OUT/raw already holds, as a fetch that changed nothing (LATEST now names it)."""
    manifest = read_manifest(target := paths.raw_snapshot(check_snapshot_id(snapshot_id)))
    _point_latest_at(paths, snapshot_id)
    return _result(target, manifest["upstream"], manifest["files"], False)


def _held_manifests(paths: Paths) -> dict[Path, Manifest]:
    return {path.parent: read_typed(path, Manifest) for path in sorted(paths.raw_dir.glob(f"[!.]*/{MANIFEST}"))}


def held_snapshot_ids(paths: Paths) -> dict[str, str]:
    """The snapshots OUT/raw holds with a known commit: full commit hash -> snapshot id."""
    return {manifest["upstream"]["commit"]: folder.name for folder, manifest in _held_manifests(paths).items()
            if manifest["upstream"].get("commit")}

