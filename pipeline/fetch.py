"""Fetch: copy one upstream snapshot (a local public/data folder or an http(s) URL of one) into
OUT/raw/<snapshot-id>/ with a manifest of what was fetched, from where, and when. The archive belongs
to OUT: its files are copies, never links, and a published snapshot's files never change; content that
differs from what was published under the same id is refused, naming the files."""

import contextlib
import functools
import hashlib
import io
import os
import re
import shlex
import shutil
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import msgspec

from pipeline import jsontext
from pipeline.errors import NEXT_STEP, PipelineError, command_name, out_option
from pipeline.files import read_typed, replace_directory, staged_directory, write_bytes_atomic, write_json_atomic
from pipeline.fingerprint import data_sha256, file_sha256, git_blob_sha1
from pipeline.paths import Paths
from pipeline.progress import each
from pipeline.settings import COMMIT_PATTERN, DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES, DEFAULT_TIMEOUT_S

MANIFEST = "manifest.json"
# Written beside the shared snapshots (not by the upstream): the facts of the commit a folder holds.
COMMIT_FACTS = "snapshot.json"
_CommitFacts = TypedDict("_CommitFacts", {key: str | None for key in (
    "repository", "commit", "commit_time", "commit_subject", "tasks_last_commit_date")}, total=False)
PINNED_COMMIT_PATTERN = re.compile(r"/([0-9a-f]{40})/")
MAX_REDIRECTS = 5
# The longest a single wait (a socket's timeout, the deadline's timer) is asked to last: the platform's
# clocks hold no more, and a deadline further off (--timeout 1e308) is as good as none.
LONGEST_WAIT_S = 1e9
# A compressed body may expand at most this many times its received size: JSON compresses some 5 to 30
# times, a compression bomb some 1,000 times. It is refused as it expands, before its bytes reach the disk
# and a parse of them the memory (urllib3 decompresses each read into at most the bytes asked for).
MAX_EXPANSION = 200
LOCAL_HINT = "offline? a local copy works too: make SOURCE=<folder>"
# Per local source folder and file: size, mtime and ctime in ns, inode and sha256, as git's index keeps
# them. When every file's entry matches, none is read; otherwise (cp -a, rsync -a, an edit in place, a
# git checkout: each gives a new ctime or inode) all are copied and hashed. An entry touched within
# RACY_WINDOW_NS of writing the cache could change again within the same timestamp tick: it is left out
# (git's rule).
STAT_CACHE = ".stat-cache.json"
_StatCache = dict[str, dict[str, tuple[int, int, int, int, str]]]
RACY_WINDOW_NS = 2_000_000_000
# What a fetch by URL reads of index.json and the task files: the files they imply.
_Index = msgspec.defstruct("_Index", [("tasks", list[str])])
_TaskFile = msgspec.defstruct("_TaskFile", [("configurations", list[msgspec.defstruct("_Row", [("model_id", str)])])])


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
def _dictionary_pattern(table: str, column: str) -> re.Pattern[str]:
    """A column's alphabet as the dictionary declares it (task names and snapshot ids become paths)."""
    from schemas import dictionary

    return re.compile(dictionary.table_columns(table)[column]["matches"])


def __getattr__(name: str) -> Any:
    if name == "TASK_NAME_PATTERN":  # read from the dictionary when asked for, not by every fetch
        return _dictionary_pattern("tasks", "task")
    raise AttributeError(name)


def content_digest(upstream: Mapping[str, str], files: list[FileEntry]) -> str:
    """sha256 of the upstream facts and files as json.dumps(sort_keys=True) writes them (non-ASCII as
    \\u escapes): the form the ids of snapshots without a commit have always been made from."""
    return data_sha256(jsontext.dumps({"upstream": upstream, "files": files}, indent=None, sort_keys=True))


class HttpReader:
    """The requests of one fetch over urllib3's pool (one connection reused for every file). Each has
    a deadline (`timeout_s`) within the fetch's (`fetch_deadline_s`): urllib3's timeouts bound each
    socket wait and, at the deadline, the response is shut down, so a server that trickles bytes holds
    the fetch (and OUT's lock) past neither. Redirects only to http(s) on the same host; bodies are
    streamed and capped at `max_file_bytes`."""

    def __init__(self, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float,
                 offline_hint: str = LOCAL_HINT) -> None:
        import urllib3

        self.timeout_s, self.max_file_bytes, self.fetch_deadline_s = timeout_s, max_file_bytes, fetch_deadline_s
        self.offline_hint = offline_hint  # where to go on when the network is not there
        self.restart_deadline()
        self.pool = urllib3.PoolManager(retries=False)  # a failure said at once; redirects checked here

    def restart_deadline(self) -> None:
        """Start a new fetch's deadline (one per snapshot when many are fetched in a row)."""
        self.fetch_deadline = time.monotonic() + self.fetch_deadline_s

    def _timed_out(self, url: str) -> PipelineError:
        if time.monotonic() >= self.fetch_deadline - 0.05:
            return PipelineError(f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline")
        return PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s")

    def get(self, url: str, headers: Mapping[str, str] | None = None,
            target: Path | None = None) -> tuple[int, Mapping[str, str], bytes]:
        """GET `url`: status, headers and body; with `target`, a 200 body is written to that file instead."""
        import urllib3

        deadline, asked = min(time.monotonic() + self.timeout_s, self.fetch_deadline), url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                if (left := deadline - time.monotonic()) <= 0:
                    raise self._timed_out(asked)
                left = min(left, LONGEST_WAIT_S)
                response = self.pool.request("GET", url, headers={"User-Agent": "energy-index", **(headers or {})},
                                             timeout=urllib3.Timeout(connect=left, read=left),
                                             preload_content=False, redirect=False)
                if response.status not in response.REDIRECT_STATUSES:
                    break
                response.close()
                moved = urllib.parse.urljoin(url, response.headers.get("Location", ""))
                new, old = urllib.parse.urlsplit(moved), urllib.parse.urlsplit(url)
                if new.scheme not in ("http", "https") or new.hostname != old.hostname:
                    raise PipelineError(f"{asked}: refused redirect to {moved} (only http(s) on the same host)")
                url = moved
            else:
                raise PipelineError(f"{asked}: more than {MAX_REDIRECTS} redirects")
            try:
                body = self._read(asked, response, deadline, target if response.status == 200 else None)
            except BaseException:
                response.close()  # a body left half read: the connection serves no other request
                raise
            response.release_conn()
            return response.status, response.headers, body
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(asked, error, deadline) from None

    def _failure(self, url: str, error: Exception, deadline: float) -> PipelineError:
        from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, TimeoutError as ReadTimeout

        if isinstance(error, NewConnectionError):  # refused, no route, unknown host (a ConnectTimeoutError too)
            reason = str(error).rpartition(": ")[2]
        elif isinstance(error, ConnectTimeoutError):
            reason = f"no connection within {self.timeout_s:g} s"
        elif isinstance(error, (ReadTimeout, TimeoutError)) or time.monotonic() >= deadline:
            return self._timed_out(url)
        else:
            reason = getattr(error, "reason", None) or str(error)
        return PipelineError(f"{url}: {reason} ({self.offline_hint})")

    def _read(self, url: str, response: Any, deadline: float, target: Path | None) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_file_bytes:
            raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes (Content-Length "
                                f"{declared}); raise --max-file-bytes if that is expected")
        cut = threading.Event()

        def cut_off() -> None:  # a read waiting on the socket returns at once
            cut.set()
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                response.shutdown()

        timer = threading.Timer(min(max(0.0, deadline - time.monotonic()), LONGEST_WAIT_S), cut_off)
        timer.start()
        size = 0
        try:
            if target is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") if target is not None else io.BytesIO() as handle:
                compressed = response.headers.get("Content-Encoding", "identity").strip().lower() != "identity"
                while chunk := response.read1(1 << 16):  # one socket read at most
                    if (size := size + handle.write(chunk)) > self.max_file_bytes:
                        raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes")
                    if compressed and size > MAX_EXPANSION * max(response.tell(), 1 << 16):
                        raise PipelineError(f"{url}: its compressed body expands more than {MAX_EXPANSION} times "
                                            f"({response.tell():,} bytes received gave {size:,}); refused as a "
                                            "compression bomb")
                body = b"" if target is not None else handle.getvalue()
        except Exception:
            if not cut.is_set():
                raise
        finally:
            timer.cancel()
            timer.join()
        if cut.is_set():  # the read failed or ended early because the deadline cut it off
            raise self._timed_out(url)
        return body


def _fetch_url(source: str, staging: Path, reader: HttpReader, commit_time: str | None,
               commit_facts: dict[str, str] | None,
               listing: Mapping[str, tuple[int, str]] | None) -> tuple[dict[str, str], list[FileEntry]]:
    """The upstream facts (`commit_facts`, for the commit the URL is pinned to) and the files downloaded:
    those `listing` names (name -> size and git hash, as a commit's tree lists every file of the folder),
    each checked; without one, index.json, its tasks' files and the model files those imply."""
    from http.client import responses  # imported with urllib3, not by every fetch

    from schemas.rules import MODEL_ID_PATTERN

    if urllib.parse.urlsplit(source).scheme not in ("http", "https"):
        raise PipelineError(f"{source}: only http:// and https:// URLs can be fetched")
    pinned = PINNED_COMMIT_PATTERN.search(urllib.parse.urlsplit(source).path + "/")
    upstream = {"commit": pinned.group(1)} if pinned else {}
    if commit_facts is not None:
        if upstream.get("commit", commit_facts["commit"]) != commit_facts["commit"]:
            raise PipelineError(f"{source}: not the URL of commit {commit_facts['commit']}")
        upstream = dict(commit_facts)
    upstream = _with_commit_time(upstream, commit_time, source)

    def download(name: str) -> FileEntry:
        url = f"{source.rstrip('/')}/{urllib.parse.quote(name)}"
        if (status := reader.get(url, target=staging / name)[0]) != 200:
            raise PipelineError(f"{url}: HTTP {status} {responses.get(status, '')}")
        return {"path": name, "sha256": file_sha256(staging / name), "size": (staging / name).stat().st_size}

    if listing is not None:
        files = [download(name) for name in each(sorted(listing), "fetch", "file")]
        for entry in files:
            size, blob = listing[entry["path"]]
            if entry["size"] != size or git_blob_sha1(staging / entry["path"]) != blob:
                raise PipelineError(f"{source}/{entry['path']}: not the file the commit's tree lists ({size} bytes, "
                                    f"git hash {blob[:12]}); received {entry['size']} bytes that differ; run again")
        # The tree is the snapshot as committed: a file its own index.json names and the tree lacks makes it
        # incomplete, refused before anything is kept (a missing model file would drop its rows silently).
        if missing := [name for name in named_files(staging) if name not in listing]:
            more = f" and {len(missing) - 1} more" if missing[1:] else ""
            raise PipelineError(f"{source}: the commit's tree lacks {missing[0]}{more}, which its own index.json "
                                "names; an incomplete snapshot is refused (nothing was kept)")
        return upstream, files
    files = [download("index.json")]
    tasks = read_typed(staging / "index.json", _Index, "index.json").tasks
    if not all(_dictionary_pattern("tasks", "task").match(task) for task in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in each(tasks, "fetch", "task"):
        files.append(download(name := f"tasks/{task}.json"))
        for model_id in sorted({row.model_id for row in read_typed(staging / name, _TaskFile, name).configurations}):
            if not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            files.append(download(f"models/{model_id.replace('/', '__')}__{task}.json"))
    return upstream, sorted(files, key=lambda entry: entry["path"])


def named_files(folder: Path) -> Iterator[str]:
    """The files a snapshot folder's index.json names: each task's file (tasks/<task>.json) and each of
    its models' file (models/<model>__<task>.json, from the rows of the task file, when it is there)."""
    from schemas.rules import MODEL_ID_PATTERN

    tasks = read_typed(folder / "index.json", _Index, "index.json").tasks
    if not all(_dictionary_pattern("tasks", "task").match(task) for task in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in tasks:
        yield (name := f"tasks/{task}.json")
        if not (folder / name).is_file():
            continue
        for model_id in sorted({row.model_id for row in read_typed(folder / name, _TaskFile, name).configurations}):
            if not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            yield f"models/{model_id.replace('/', '__')}__{task}.json"


def _local_files(source: str) -> tuple[Path, list[str]]:
    """The snapshot folder `source` and its upstream files, sorted, refusing links that lead outside it."""
    root, expected = Path(source), "SOURCE must be a local public/data folder or an http(s) URL"
    if not root.is_dir():
        raise PipelineError(f"{source}: {'not a folder' if root.exists() else 'no such folder'}; {expected}")
    if not (root / "index.json").is_file():
        if any((child / "index.json").is_file() for child in root.iterdir() if child.is_dir()):
            raise PipelineError(
                f"{source}: a folder of snapshot folders, not one snapshot; give one of them, or ingest them all "
                f"with '{command_name()} history --source {source}' (make history HISTORY=...)")
        raise PipelineError(
            f"{source}: not a snapshot folder (no index.json); expected the upstream public/data layout")
    inside, names = root.resolve(), []
    for pattern in ("index.json", "tasks/*.json", "models/*.json"):
        folder_is_link = (root / pattern).parent.is_symlink()
        for path in root.glob(pattern):
            # Only a link can lead outside; resolving every file would cost a second per 6,000 files.
            if (folder_is_link or path.is_symlink()) and not (target := path.resolve()).is_relative_to(inside):
                raise PipelineError(f"{path}: a link to {target}, outside the source directory; refused")
            if path.is_file():
                names.append(path.relative_to(root).as_posix())
    return root, sorted(names)


def _stat_key(stat: os.stat_result, path: Path, max_file_bytes: int) -> tuple[int, int, int, int]:
    if stat.st_size > max_file_bytes:
        raise PipelineError(f"{path}: larger than the size cap of {max_file_bytes} bytes")
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def _fetch_local(source: str, paths: Paths, staging: Path, commit_time: str | None,
                 max_file_bytes: int, full_check: bool = False) -> tuple[dict[str, str], list[FileEntry]]:
    """The upstream facts and the files' manifest entries. When the stat cache vouches for every file and
    the archive holds them, nothing is read; otherwise all are copied into `staging` and hashed (the id may
    depend on their content)."""
    root, names = _local_files(source)
    upstream, origin = _with_commit_time(_local_commit_facts(root), commit_time, source), str(root.resolve())
    try:
        cache = read_typed(paths.raw_dir / STAT_CACHE, _StatCache)
    except (OSError, PipelineError):
        cache = {}
    cached = cache.get(origin, {})
    if all(cached.get(name, ())[:4] == _stat_key((root / name).stat(), root / name, max_file_bytes) for name in names):
        files: list[FileEntry] = [{"path": name, "sha256": cached[name][4], "size": cached[name][0]} for name in names]
        if _held_already(paths, snapshot_id_of(upstream, files), upstream, files, full_check):
            return upstream, files
    files, cache[origin] = _copy_local(root, names, staging, max_file_bytes)
    write_json_atomic(paths.raw_dir / STAT_CACHE, cache)
    return upstream, files


def _copy_local(root: Path, names: list[str], staging: Path,
                max_file_bytes: int) -> tuple[list[FileEntry], dict[str, tuple]]:
    """Copy the files into `staging`, hashing the bytes written on the way (one read of each, which
    measured as fast as the kernel's copy followed by a read of the copy): their entries and the stat
    cache's entries for them. A file whose stat moved while it was read was being changed: refused."""
    files: list[FileEntry] = []
    cached, changing, racy_after = {}, [], time.time_ns() - RACY_WINDOW_NS
    for folder in {(staging / name).parent for name in names}:
        folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        digest, size, path = hashlib.sha256(), 0, root / name
        with open(path, "rb") as source, open(staging / name, "xb") as copy:
            before = _stat_key(os.fstat(source.fileno()), path, max_file_bytes)
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                size += copy.write(chunk)
            if _stat_key(os.fstat(source.fileno()), path, max_file_bytes) != before:
                changing.append(name)
        files.append({"path": name, "sha256": digest.hexdigest(), "size": size})
        if max(before[1:3]) < racy_after:
            cached[name] = (*before, files[-1]["sha256"])
    if changing:
        raise PipelineError(f"{root}: files changed while they were being fetched ({', '.join(changing[:5])}); "
                            "run again")
    return files, cached


def _local_commit_facts(root: Path) -> dict[str, str]:
    if not (path := root / COMMIT_FACTS).is_file():
        return {}
    facts = {key: value for key, value in read_typed(path, _CommitFacts).items() if value is not None}
    if "commit" in facts and not COMMIT_PATTERN.match(facts["commit"]):
        raise PipelineError(f"{path}: commit {facts['commit']!r} is not a git commit hash")
    if "commit_time" in facts:
        checked_time(facts["commit_time"], f"{path}: commit_time")
    return facts


def checked_time(text: str, what: str) -> str:
    """`text` if it is an ISO 8601 time (a date, T, a time of day); else an error naming `what`."""
    with contextlib.suppress(ValueError):
        if re.match(r"^\d{4}-\d{2}-\d{2}T", text) and commit_moment(text):
            return text
    raise PipelineError(f"{what} {text!r} is not an ISO 8601 time")


def commit_moment(commit_time: str) -> datetime:
    """An ISO 8601 commit time as an aware UTC time (one without an offset is taken as UTC)."""
    moment = datetime.fromisoformat(commit_time)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def snapshot_id_of(upstream: Mapping[str, str], files: list[FileEntry]) -> str:
    """The UTC date of the commit and its short hash: the same id for a commit whether its facts come
    from GitHub's API (times in UTC) or a folder's snapshot.json (times in the committer's zone)."""
    if (commit := upstream.get("commit")) and upstream.get("commit_time"):
        return f"{commit_moment(upstream['commit_time']).date().isoformat()}-{commit[:7]}"
    return commit[:7] if commit else f"local-{content_digest(upstream, files)[:12]}"


def check_snapshot_id(snapshot_id: str) -> str:
    if not _dictionary_pattern("snapshots", "snapshot_id").match(snapshot_id):
        raise PipelineError(f"snapshot id {snapshot_id!r} is not a snapshot id (letters, digits, '.', '_', '-')")
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


def archive_damage(paths: Paths, snapshot_id: str, *, full: bool) -> str | None:
    """What is wrong with the archived copy OUT/raw/<snapshot_id> against its manifest, or None when it is
    whole: a file missing or of another size (the cheap check, by stat), or, when `full`, of another sha256,
    or (fetched from a URL, where the commit's tree is the whole snapshot) lacking a file its index.json names."""
    directory = paths.raw_snapshot(snapshot_id)
    try:
        manifest = read_manifest(directory)
    except PipelineError:
        return "its manifest is missing or unreadable"
    for entry in manifest["files"]:
        try:
            size = (directory / entry["path"]).stat().st_size
        except OSError:
            return f"{entry['path']} is missing"
        if size != entry["size"]:
            return f"{entry['path']} has {size:,} bytes, fetched with {entry['size']:,}"
        if full and file_sha256(directory / entry["path"]) != entry["sha256"]:
            return f"{entry['path']} differs from what was fetched (sha256)"
    if full and "://" in manifest["source"]:
        held = {entry["path"] for entry in manifest["files"]}
        try:
            missing = [name for name in named_files(directory) if name not in held]
        except PipelineError as error:
            return str(error)
        if missing:
            return f"it lacks {missing[0]}, which its index.json names"
    return None


def fetch_again(paths: Paths, snapshot_id: str) -> str:
    """The command that fetches an archived snapshot again, replacing a damaged copy, as it can be typed here."""
    try:
        manifest = read_manifest(paths.raw_snapshot(snapshot_id))
    except PipelineError:
        return f"{command_name()} fetch --source FOLDER_OR_URL{out_option(paths.out)}"
    commit = manifest["upstream"].get("commit")
    if "://" in manifest["source"] and commit:
        return f"{command_name()} fetch --commit {commit}{out_option(paths.out)}"
    return f"{command_name()} fetch --source {shlex.quote(manifest['source'])}{out_option(paths.out)}"


def check_archive(paths: Paths, snapshot_ids: list[str]) -> None:
    """Refuse, before any of them is ingested, snapshots whose archived copy is not whole (the full check),
    naming the command that fetches each again."""
    for snapshot_id in snapshot_ids:
        if (damage := archive_damage(paths, snapshot_id, full=True)) is not None:
            raise PipelineError(f"{paths.raw_snapshot(snapshot_id)}: {damage}, so it cannot be ingested again; "
                                f"fetch it again ('{fetch_again(paths, snapshot_id)}') and run again")


def _held_already(paths: Paths, snapshot_id: str, upstream: dict[str, str], files: list[FileEntry],
                  full: bool = False) -> bool:
    """True if OUT/raw already holds exactly this snapshot, whole (archive_damage, cheap or `full`; a
    damaged copy is replaced). Different content under the id of a published snapshot is refused; under
    an unpublished one (a failed earlier fetch) it is replaced."""
    if not (paths.raw_snapshot(snapshot_id) / MANIFEST).is_file():
        return False
    previous = read_manifest(paths.raw_snapshot(snapshot_id))
    if previous["files"] == files and previous["upstream"] == upstream:
        return archive_damage(paths, snapshot_id, full=full) is None
    if previous["upstream"] == upstream and archive_damage(paths, snapshot_id, full=True) is not None:
        return False  # a damaged or incomplete copy of the same commit: replaced by a whole one
    published = Paths(paths.out)
    if snapshot_id in published.parquet_files("snapshots") or (
            published.parquet_dir / "snapshots" / f"{snapshot_id}.parquet").is_file():  # before the hive layout
        before, now = ({entry["path"]: entry for entry in listed} for listed in (previous["files"], files))
        differing = [COMMIT_FACTS] if previous["upstream"] != upstream else []
        differing += sorted(path for path in before.keys() | now.keys() if before.get(path) != now.get(path))
        shown = ", ".join(differing[:10]) + (f" and {len(differing) - 10} more" if len(differing) > 10 else "")
        raise PipelineError(
            f"these files differ from snapshot {snapshot_id} as it was published: {shown}. A published snapshot "
            f"never changes: to ingest changed data, give it its own identity (remove or edit {COMMIT_FACTS})")
    return False


def fetch(source: str, paths: Paths, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, fetch_deadline_s: float = DEFAULT_FETCH_DEADLINE_S,
          commit_time: str | None = None, reader: HttpReader | None = None,
          commit_facts: dict[str, str] | None = None, listing: Mapping[str, tuple[int, str]] | None = None,
          full_check: bool = False) -> FetchResult:
    """Bring `source` into OUT/raw/<snapshot-id>/. For a URL, `reader` carries deadlines already running
    (the upstream's API was asked first), `commit_facts` are the upstream facts of the commit the URL is
    pinned to and `listing` its files as the commit's tree lists them. A copy already held is checked
    (archive_damage: by stat, or `full_check` by sha256 too) and replaced when damaged."""
    staging = paths.raw_dir / f".staging-{os.getpid()}"
    for leftover in paths.raw_dir.glob(".staging-*"):  # left by a run that was stopped (we hold OUT's lock)
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        if "://" in source:
            reader, origin = reader or HttpReader(timeout_s, max_file_bytes, fetch_deadline_s), source
            upstream, files = _fetch_url(source, staging, reader, commit_time, commit_facts, listing)
        else:
            upstream, files = _fetch_local(source, paths, staging, commit_time, max_file_bytes, full_check)
            origin = str(Path(source).resolve())
        target = paths.raw_snapshot(snapshot_id := snapshot_id_of(upstream, files))
        if changed := not _held_already(paths, snapshot_id, upstream, files, full_check):
            write_json_atomic(staging / MANIFEST, Manifest(
                snapshot_id=snapshot_id, source=origin, retrieved=datetime.now(timezone.utc).date().isoformat(),
                upstream=upstream, files=files))
            replace_directory(staging, target)
        _point_latest_at(paths, snapshot_id)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    notices = () if upstream.get("commit_time") else (
        f"{source} has no commit time (no snapshot.json): it is snapshot {snapshot_id}, placed in the history by "
        f"the day it was first fetched, {read_manifest(target)['retrieved']}. To place it by its upstream commit, "
        "give --commit-time (make COMMIT_TIME=2026-02-16T09:48:29Z) or a snapshot.json with commit_time beside its "
        "files",)
    return _result(target, upstream, files, changed, notices)


def _with_commit_time(upstream: dict[str, str], commit_time: str | None, source: str) -> dict[str, str]:
    """The upstream facts with a commit time given on the command line, which must not contradict them."""
    if commit_time is None:
        return upstream
    if upstream.get("commit_time") not in (None, commit_time):
        raise PipelineError(f"{source}: --commit-time {commit_time} contradicts its snapshot.json "
                            f"({upstream['commit_time']})")
    return {**upstream, "commit_time": checked_time(commit_time, "--commit-time")}


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


def move_to_current_ids(paths: Paths) -> dict[str, str]:
    """Give every fetched snapshot the id snapshot_id_of forms today (ids were once formed from the
    committer's local date, not the UTC date): OUT/raw/<old> becomes OUT/raw/<new>, its files hard
    links, its manifest naming the new id. Returns old -> new. A stop halfway leaves both folders and
    the next run finishes the move."""
    moved = {}
    for old, manifest in _held_manifests(paths).items():
        if (new_id := snapshot_id_of(manifest["upstream"], manifest["files"])) == old.name:
            continue
        if not (paths.raw_snapshot(check_snapshot_id(new_id)) / MANIFEST).is_file():
            with staged_directory(paths.raw_snapshot(new_id)) as staging:
                shutil.copytree(old, staging, copy_function=os.link, dirs_exist_ok=True)
                # Replaced by rename, so the manifest linked from the old folder is not written through.
                write_json_atomic(staging / MANIFEST, {**manifest, "snapshot_id": new_id})
        shutil.rmtree(old)
        moved[old.name] = new_id
    pointer = paths.latest_snapshot_pointer
    if pointer.is_file() and (named := pointer.read_text(encoding="utf-8").strip()) in moved:
        _point_latest_at(paths, moved[named])
    return moved


def stale_published_ids(paths: Paths) -> dict[str, str]:
    """Snapshots of the published build under an id other than the one snapshot_id_of forms from
    their commit facts: old id -> current id."""
    # After move_to_current_ids every fetched snapshot's folder has its current id: only a published
    # snapshot with no folder of its name can have an id of an earlier rule.
    held = {folder.name for folder in paths.raw_dir.iterdir()} if paths.raw_dir.is_dir() else set()
    if not (files := [str(path) for s, path in Paths(paths.out).parquet_files("snapshots").items() if s not in held]):
        return {}
    import pyarrow.parquet as pq

    rows = pq.read_table(files, columns=["snapshot_id", "commit", "commit_time"], partitioning=None).to_pylist()
    current = {row["snapshot_id"]: snapshot_id_of({**row, "commit_time": row["commit_time"].isoformat()}, [])
               for row in rows if row["commit"] and row["commit_time"]}
    return {old: new for old, new in current.items() if old != new}
