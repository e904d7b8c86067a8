"""Fetch: copy one upstream snapshot (a local public/data directory or an http(s) URL of one) into
OUT/raw/<snapshot-id>/ with a manifest of what was fetched, from where, and when.

The fetched snapshot is an archive that belongs to OUT: its files are copies, never links to files
someone else can edit, and a published snapshot's files and manifest never change. Content that
differs from what was published before under the same snapshot id is refused, naming the files.
"""

import hashlib
import json
import os
import re
import shutil
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import urllib3

from pipeline.errors import NEXT_STEP, PipelineError, command_name
from pipeline.files import load_json_strict, replace_directory, write_bytes_atomic
from pipeline.paths import Paths
from schemas import dictionary
from schemas.rules import MODEL_ID_PATTERN


# The upstream, its hosts and the fetch's bounds are settings (pipeline/settings.py), re-exported here
# for the modules that fetch.
from pipeline.settings import (  # noqa: E402
    DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES, DEFAULT_TIMEOUT_S, GITHUB_API, GITHUB_RAW, GITHUB_TOKEN_VARIABLE,
    UPSTREAM_PATH, UPSTREAM_REPOSITORY, Setting,
)

MANIFEST = "manifest.json"
# snapshot.json is written beside the shared snapshots (not by the upstream) with the commit facts.
COMMIT_FACTS = "snapshot.json"
COMMIT_FACT_KEYS = ("repository", "commit", "commit_time", "commit_subject", "tasks_last_commit_date")
# A task name and a snapshot id become folder and file names: the dictionary declares their alphabet.
TASK_NAME_PATTERN = re.compile(dictionary.table_columns("tasks")["task"]["matches"])
PINNED_COMMIT_PATTERN = re.compile(r"/([0-9a-f]{40})/")
MAX_REDIRECTS = 5
SNAPSHOT_ID_PATTERN = re.compile(dictionary.table_columns("snapshots")["snapshot_id"]["matches"])
COMMIT_PATTERN = re.compile(dictionary.table_columns("snapshots")["commit"]["matches"])
COMMIT_TIME_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}T")
# Per local source folder and file: size, mtime and ctime in ns, inode and sha256, as git's index keeps
# them. A file whose entry matches is not read again; any other (cp -a, rsync -a, an edit in place, a
# git checkout: each gives a new ctime or inode) is hashed.
STAT_CACHE = ".stat-cache.json"
# An entry touched this recently when the cache is written could be edited again within the same
# timestamp tick; it is left out, so the next run hashes that file (git's "racily clean" rule).
RACY_WINDOW_NS = 2_000_000_000
READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class FetchResult:
    snapshot_id: str
    directory: Path
    file_count: int
    total_bytes: int
    changed: bool
    # sha256 of the manifest's files and upstream facts: what the snapshot is, whatever its id.
    content_sha256: str
    notices: tuple[str, ...] = ()


def _is_url(source: str) -> bool:
    return "://" in source


def _model_file_name(model_id: str, task: str) -> str:
    return f"{model_id.replace('/', '__')}__{task}.json"


def content_digest(upstream: dict[str, Any], files: list[dict[str, Any]]) -> str:
    listing = json.dumps({"upstream": upstream, "files": files}, sort_keys=True)
    return hashlib.sha256(listing.encode()).hexdigest()


class HttpReader:
    """The requests of one fetch, over urllib3's connection pool (one connection reused for all files).

    Each request has a wall-clock deadline of its own (`timeout_s`) and shares the fetch's; every socket
    wait is bounded by the time left before both, so a server that trickles bytes holds the fetch (and
    the lock) past neither. Redirects are followed only to http(s) on the same host; bodies are capped
    at `max_file_bytes` and streamed, so memory stays flat."""

    def __init__(
        self, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float,
        offline_hint: str = "offline? a local copy works too: make SOURCE=<folder>",
    ) -> None:
        self.timeout_s = timeout_s
        self.max_file_bytes = max_file_bytes
        self.fetch_deadline_s = fetch_deadline_s
        self.offline_hint = offline_hint
        self.restart_deadline()
        # Retries off: a failure is reported at once, and redirects are checked here before any is followed.
        self.pool = urllib3.PoolManager(retries=False, headers={"User-Agent": "energy-index"})

    def restart_deadline(self) -> None:
        """Start a new fetch's deadline (one per snapshot when many are fetched in a row)."""
        self.fetch_deadline = time.monotonic() + self.fetch_deadline_s

    def _time_left(self, url: str, request_deadline: float) -> float:
        now = time.monotonic()
        if now >= self.fetch_deadline:
            raise PipelineError(f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline")
        if now >= request_deadline:
            raise PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s")
        return min(request_deadline, self.fetch_deadline) - now

    def _failure(self, url: str, error: Exception) -> PipelineError:
        # urllib3's NewConnectionError (refused, no route, unknown host) is a subclass of its
        # ConnectTimeoutError: told apart first, and a connection that never came is named as such.
        if isinstance(error, urllib3.exceptions.NewConnectionError):
            reason = str(error).rpartition(": ")[2] or "cannot connect"
            return PipelineError(f"{url}: {reason} ({self.offline_hint})")
        if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
            return PipelineError(f"{url}: no connection within {self.timeout_s:g} s ({self.offline_hint})")
        if isinstance(error, (urllib3.exceptions.TimeoutError, TimeoutError)):
            if time.monotonic() >= self.fetch_deadline - 0.05:
                return PipelineError(f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline")
            return PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s")
        reason = getattr(error, "reason", None) or error
        return PipelineError(f"{url}: {reason} ({self.offline_hint})")

    def get(
        self, url: str, headers: Mapping[str, str] | None = None, *, target: Path | None = None
    ) -> tuple[int, Mapping[str, str], bytes | dict[str, Any]]:
        """GET `url`: (status, headers, body). With `target`, a 200 body is streamed to that file and
        the body returned is its manifest entry (sha256, size); otherwise the body is the bytes read."""
        request_deadline = time.monotonic() + self.timeout_s
        asked = url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                left = self._time_left(asked, request_deadline)
                response = self.pool.request(
                    "GET", url, headers=dict(headers or {}), preload_content=False, redirect=False,
                    timeout=urllib3.Timeout(connect=left, read=left),
                )
                if response.status not in (301, 302, 303, 307, 308):
                    break
                target_url = urllib.parse.urljoin(url, response.headers.get("Location", ""))
                response.close()  # its body unread: the connection serves no other request
                old, new = urllib.parse.urlsplit(url), urllib.parse.urlsplit(target_url)
                if new.scheme not in ("http", "https") or new.hostname != old.hostname:
                    raise PipelineError(f"{asked}: refused redirect to {target_url} (only http(s) on the same host)")
                url = target_url
            else:
                raise PipelineError(f"{asked}: more than {MAX_REDIRECTS} redirects")
            try:
                if target is not None and response.status == 200:
                    body: bytes | dict[str, Any] = self._stream(asked, response, request_deadline, target)
                else:
                    body = b"".join(self._chunks(asked, response, request_deadline))
            except BaseException:
                response.close()  # a body left half read: the connection serves no other request
                raise
            response.release_conn()
            return response.status, response.headers, body
        except PipelineError:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(asked, error) from None

    def _chunks(self, url: str, response: urllib3.BaseHTTPResponse, request_deadline: float) -> Iterator[bytes]:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_file_bytes:
            raise PipelineError(
                f"{url}: larger than the size cap of {self.max_file_bytes} bytes (Content-Length "
                f"{declared}); raise --max-file-bytes if that is expected"
            )
        sock = getattr(response.connection, "sock", None)
        size = 0
        while True:
            if sock is not None:
                sock.settimeout(self._time_left(url, request_deadline))
            # read1: at most one socket read, so the deadlines are checked between any two.
            chunk = response.read1(READ_CHUNK)
            if not chunk:
                return
            size += len(chunk)
            if size > self.max_file_bytes:
                raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes")
            yield chunk
            self._time_left(url, request_deadline)

    def _stream(self, url: str, response: urllib3.BaseHTTPResponse, request_deadline: float, target: Path) -> dict[str, Any]:
        target.parent.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        with open(target, "wb") as handle:
            for chunk in self._chunks(url, response, request_deadline):
                digest.update(chunk)
                size += len(chunk)
                handle.write(chunk)
        return {"sha256": digest.hexdigest(), "size": size}

    def download(self, base_url: str, relative: str, target: Path) -> dict[str, Any]:
        """Write one file of the snapshot at `base_url` to `target`; return its manifest entry."""
        url = base_url.rstrip("/") + "/" + urllib.parse.quote(relative)
        status, _, entry = self.get(url, target=target)
        if status != 200:
            raise PipelineError(f"{url}: HTTP {status} {_reason(status)}")
        assert isinstance(entry, dict)
        return {"path": relative, **entry}


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def git_blob_sha(path: Path) -> str:
    """The hash git gives a file's content: what GitHub's tree listing says each file is."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, lambda: digest).hexdigest()


def _fetch_listed(
    source: str, staging: Path, reader: HttpReader, listing: Mapping[str, tuple[int, str]]
) -> list[dict[str, Any]]:
    """Download the files a commit's tree lists (all of them, as a local copy of the folder holds them),
    each checked against the size and git hash the listing gives."""
    files = []
    for name in sorted(listing):
        entry = reader.download(source, name, staging / name)
        size, blob = listing[name]
        if entry["size"] != size or git_blob_sha(staging / name) != blob:
            raise PipelineError(f"{source}/{name}: not the file the commit's tree lists ({size} bytes, git hash "
                                f"{blob[:12]}); received {entry['size']} bytes that differ; run again")
        files.append(entry)
    return files


def _fetch_url(
    source: str, staging: Path, reader: HttpReader, listing: Mapping[str, tuple[int, str]] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Download a snapshot into `staging`: the files `listing` names, or else index.json, the task files
    it lists and the model files those imply."""
    scheme = urllib.parse.urlsplit(source).scheme
    if scheme not in ("http", "https"):
        raise PipelineError(f"{source}: only http:// and https:// URLs can be fetched")
    pinned = PINNED_COMMIT_PATTERN.search(urllib.parse.urlsplit(source).path + "/")
    if listing is not None:
        files = _fetch_listed(source, staging, reader, listing)
        return ({"commit": pinned.group(1)} if pinned else {}), sorted(files, key=lambda entry: entry["path"])
    files: list[dict[str, Any]] = []

    def download_and_parse(name: str) -> Any:
        files.append(reader.download(source, name, staging / name))
        return load_json_strict(staging / name, name)

    index = download_and_parse("index.json")
    tasks = index.get("tasks") if isinstance(index, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(t, str) and TASK_NAME_PATTERN.match(t) for t in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in tasks:
        name = f"tasks/{task}.json"
        document = download_and_parse(name)
        rows = document.get("configurations") if isinstance(document, dict) else None
        if not isinstance(rows, list):
            raise PipelineError(f"{name}: field 'configurations' must be a list")
        model_ids = sorted({row.get("model_id") for row in rows if isinstance(row, dict)}, key=str)
        for model_id in model_ids:
            if not isinstance(model_id, str) or not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            download_and_parse(f"models/{_model_file_name(model_id, task)}")
    return ({"commit": pinned.group(1)} if pinned else {}), sorted(files, key=lambda entry: entry["path"])


def _local_files(root: Path) -> list[str]:
    """The upstream files below `root`, refusing links that lead outside it."""
    resolved_root = root.resolve()
    names = []
    for pattern in ("index.json", "tasks/*.json", "models/*.json"):
        folder_is_link = (root / pattern).parent.is_symlink()
        for path in sorted(root.glob(pattern)):
            # Only a link can lead outside; resolving every file would cost a second per 6,000 files.
            if folder_is_link or path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(resolved_root):
                    raise PipelineError(f"{path}: a link to {target}, outside the source directory; refused")
            if path.is_file():
                names.append(path.relative_to(root).as_posix())
    return names


def _check_local_source(source: str) -> Path:
    root = Path(source)
    if not root.exists():
        raise PipelineError(f"{source}: no such folder; SOURCE must be a local public/data folder or an http(s) URL")
    if not root.is_dir():
        raise PipelineError(f"{source}: not a folder; SOURCE must be a local public/data folder or an http(s) URL")
    if not (root / "index.json").is_file():
        if any((child / "index.json").is_file() for child in root.iterdir() if child.is_dir()):
            raise PipelineError(
                f"{source}: a folder of snapshot folders, not one snapshot; give one of them, or ingest them all "
                f"with '{command_name()} history --source {source}' (make history HISTORY=...)"
            )
        raise PipelineError(f"{source}: not a snapshot folder (no index.json); expected the upstream public/data layout")
    return root


def _stat_key(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


class _StatCache:
    """Remembers each local source file's stat and sha256, so an unchanged file is not read again."""

    def __init__(self, paths: Paths) -> None:
        self.path = paths.raw_dir / STAT_CACHE
        try:
            self.entries: dict[str, dict[str, list[Any]]] = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            self.entries = {}

    def describe(self, root: Path, names: list[str], max_file_bytes: int) -> list[dict[str, Any]]:
        """Each file's manifest entry, hashing only the files whose stat changed."""
        key = str(root.resolve())
        known = self.entries.get(key, {})
        fresh: dict[str, list[Any]] = {}
        files = []
        racy_after = time.time_ns() - RACY_WINDOW_NS
        for name in names:
            stat = (root / name).stat()
            if stat.st_size > max_file_bytes:
                raise PipelineError(f"{root / name}: larger than the size cap of {max_file_bytes} bytes")
            cached = known.get(name)
            if cached is not None and cached[:4] == _stat_key(stat):
                sha256 = cached[4]
            else:
                sha256 = _sha256_of_file(root / name)
            if max(stat.st_mtime_ns, stat.st_ctime_ns) < racy_after:
                fresh[name] = [*_stat_key(stat), sha256]
            files.append({"path": name, "sha256": sha256, "size": stat.st_size})
        if fresh != known:
            self.entries[key] = fresh
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(self.path, json.dumps(self.entries, sort_keys=True).encode())
        return sorted(files, key=lambda entry: entry["path"])


def _sha256_of_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _copy_file(source: Path, target: Path) -> dict[str, Any]:
    """Copy one file into the archive (the kernel copies it: shutil uses sendfile) and describe what was
    written: the sha256 of the copy itself, not of the source someone may be editing."""
    shutil.copyfile(source, target)
    return {"sha256": _sha256_of_file(target), "size": target.stat().st_size}


def _copy_local(root: Path, staging: Path, names: list[str]) -> list[dict[str, Any]]:
    for folder in sorted({(staging / name).parent for name in names}):
        folder.mkdir(parents=True, exist_ok=True)
    files = [{"path": name, **_copy_file(root / name, staging / name)} for name in names]
    return sorted(files, key=lambda entry: entry["path"])


def _local_commit_facts(root: Path) -> dict[str, Any]:
    facts_path = root / COMMIT_FACTS
    if not facts_path.is_file():
        return {}
    facts = load_json_strict(facts_path)
    if not isinstance(facts, dict):
        raise PipelineError(f"{facts_path}: must be a JSON object")
    known = {key: facts[key] for key in COMMIT_FACT_KEYS if isinstance(facts.get(key), str)}
    if "commit" in known and not COMMIT_PATTERN.match(known["commit"]):
        raise PipelineError(f"{facts_path}: commit {known['commit']!r} is not a git commit hash")
    if "commit_time" in known and not _is_commit_time(known["commit_time"]):
        raise PipelineError(f"{facts_path}: commit_time {known['commit_time']!r} is not an ISO 8601 time")
    return known


def _is_commit_time(text: str) -> bool:
    if not COMMIT_TIME_PATTERN.match(text):
        return False
    try:
        commit_moment(text)
    except ValueError:
        return False
    return True


def commit_moment(commit_time: str) -> datetime:
    """An ISO 8601 commit time as an aware UTC time (one without an offset is taken as UTC)."""
    moment = datetime.fromisoformat(commit_time)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def snapshot_id_of(upstream: dict[str, Any], files: list[dict[str, Any]]) -> str:
    """The UTC date of the commit and its short hash: the same id for a commit whether its facts come
    from GitHub's API (times in UTC) or a folder's snapshot.json (times in the committer's zone)."""
    commit = upstream.get("commit")
    if commit and upstream.get("commit_time"):
        return f"{commit_moment(upstream['commit_time']).date().isoformat()}-{commit[:7]}"
    if commit:
        return commit[:7]
    return f"local-{content_digest(upstream, files)[:12]}"


def check_snapshot_id(snapshot_id: str) -> str:
    if not SNAPSHOT_ID_PATTERN.match(snapshot_id):
        raise PipelineError(f"snapshot id {snapshot_id!r} is not a snapshot id (letters, digits, '.', '_', '-')")
    return snapshot_id


def read_manifest(snapshot_dir: Path) -> dict[str, Any]:
    manifest_path = snapshot_dir / MANIFEST
    if not manifest_path.is_file():
        raise PipelineError(
            f"snapshot {snapshot_dir.name} has not been fetched; {NEXT_STEP}"
        )
    return load_json_strict(manifest_path)


def latest_snapshot_id(paths: Paths) -> str:
    pointer = paths.latest_snapshot_pointer
    if not pointer.is_file():
        raise PipelineError(f"no snapshot has been fetched yet; {NEXT_STEP}")
    return check_snapshot_id(pointer.read_text(encoding="utf-8").strip())


def _differing_files(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    old_by_path = {entry["path"]: entry for entry in old}
    new_by_path = {entry["path"]: entry for entry in new}
    return sorted(
        path for path in old_by_path.keys() | new_by_path.keys() if old_by_path.get(path) != new_by_path.get(path)
    )


def _is_published(paths: Paths, snapshot_id: str) -> bool:
    published = Paths(paths.out)
    return snapshot_id in published.parquet_files("snapshots") or (
        published.parquet_dir / "snapshots" / f"{snapshot_id}.parquet"  # a build from before the hive layout
    ).is_file()


def _check_same_content(
    paths: Paths, snapshot_id: str, upstream: dict[str, Any], files: list[dict[str, Any]]
) -> bool:
    """True if OUT/raw already holds exactly this snapshot. Different content under the id of a
    published snapshot is refused; under an unpublished one (a failed earlier fetch) it is replaced."""
    target = paths.raw_snapshot(snapshot_id)
    if not (target / MANIFEST).is_file():
        return False
    previous = read_manifest(target)
    if previous.get("files") == files and previous.get("upstream") == upstream:
        return True
    if _is_published(paths, snapshot_id):
        differing = _differing_files(previous.get("files", []), files)
        if previous.get("upstream") != upstream:
            differing.insert(0, COMMIT_FACTS)
        shown = ", ".join(differing[:10]) + (f" and {len(differing) - 10} more" if len(differing) > 10 else "")
        raise PipelineError(
            f"these files differ from snapshot {snapshot_id} as it was published: {shown}. A published snapshot "
            f"never changes: to ingest changed data, give it its own identity (remove or edit {COMMIT_FACTS})"
        )
    return False


def fetch(
    source: str,
    paths: Paths,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    fetch_deadline_s: float = DEFAULT_FETCH_DEADLINE_S,
    commit_time: str | None = None,
    reader: HttpReader | None = None,
    commit_facts: dict[str, Any] | None = None,
    listing: Mapping[str, tuple[int, str]] | None = None,
) -> FetchResult:
    """Bring `source` into OUT/raw/<snapshot-id>/. A local folder whose content is already there is
    only read where its files' stat changed, and nothing is written. For a URL, `reader` carries the
    transfer's deadlines when the fetch has already made requests of its own (the upstream's API), and
    `commit_facts` are the upstream facts of the commit the URL is pinned to, `listing` its files (name
    -> size and git hash) as the commit's tree lists them."""
    staging = paths.raw_dir / f".staging-{os.getpid()}"
    # The caller holds OUT's lock: a staging folder left here was left by a run that was stopped.
    for leftover in paths.raw_dir.glob(".staging-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if not _is_url(source):
        root = _check_local_source(source)
        names = _local_files(root)
        paths.raw_dir.mkdir(parents=True, exist_ok=True)
        upstream = _with_commit_time(_local_commit_facts(root), commit_time, source)
        files = _StatCache(paths).describe(root, names, max_file_bytes)
        recorded_source = str(root.resolve())
    try:
        if _is_url(source) or not _check_same_content(paths, snapshot_id_of(upstream, files), upstream, files):
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            if _is_url(source):
                reader = reader or HttpReader(timeout_s, max_file_bytes, fetch_deadline_s)
                upstream, files = _fetch_url(source, staging, reader, listing)
                if commit_facts is not None:
                    if upstream.get("commit", commit_facts["commit"]) != commit_facts["commit"]:
                        raise PipelineError(f"{source}: not the URL of commit {commit_facts['commit']}")
                    upstream = dict(commit_facts)
                upstream = _with_commit_time(upstream, commit_time, source)
                recorded_source = source
            else:
                copied = _copy_local(root, staging, names)
                if copied != files:
                    changing = ", ".join(_differing_files(files, copied)[:5])
                    raise PipelineError(f"{source}: files changed while they were being fetched ({changing}); run again")
        snapshot_id = check_snapshot_id(snapshot_id_of(upstream, files))
        target = paths.raw_snapshot(snapshot_id)
        changed = staging.is_dir() and not _check_same_content(paths, snapshot_id, upstream, files)
        if changed:
            manifest = {
                "snapshot_id": snapshot_id,
                "source": recorded_source,
                "retrieved": datetime.now(timezone.utc).date().isoformat(),
                "upstream": upstream,
                "files": files,
            }
            write_bytes_atomic(staging / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
            replace_directory(staging, target)
        write_bytes_atomic(paths.latest_snapshot_pointer, f"{snapshot_id}\n".encode())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    notices = ()
    if not upstream.get("commit_time"):
        retrieved = read_manifest(target)["retrieved"]
        notices = (
            f"{source} has no commit time (no snapshot.json): it is snapshot {snapshot_id}, placed in the history by "
            f"the day it was first fetched, {retrieved}. To place it by its upstream commit, give --commit-time "
            f"(make COMMIT_TIME=2026-02-16T09:48:29Z) or a snapshot.json with commit_time beside its files",
        )
    return FetchResult(
        snapshot_id=snapshot_id,
        directory=target,
        file_count=len(files),
        total_bytes=sum(f["size"] for f in files),
        changed=changed,
        content_sha256=content_digest(upstream, files),
        notices=notices,
    )


def held_snapshot(paths: Paths, snapshot_id: str) -> FetchResult:
    """A snapshot OUT/raw already holds, described as a fetch that changed nothing (the last fetch's
    pointer now names it)."""
    target = paths.raw_snapshot(check_snapshot_id(snapshot_id))
    manifest = read_manifest(target)
    paths.raw_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(paths.latest_snapshot_pointer, f"{snapshot_id}\n".encode())
    files = manifest["files"]
    return FetchResult(
        snapshot_id=snapshot_id, directory=target, file_count=len(files),
        total_bytes=sum(f["size"] for f in files), changed=False,
        content_sha256=content_digest(manifest["upstream"], files),
    )


def held_snapshot_ids(paths: Paths) -> dict[str, str]:
    """The snapshots OUT/raw holds with a known commit: full commit hash -> snapshot id."""
    held = {}
    for manifest_path in sorted(paths.raw_dir.glob(f"*/{MANIFEST}")):
        if manifest_path.parent.name.startswith("."):
            continue
        commit = (load_json_strict(manifest_path).get("upstream") or {}).get("commit")
        if commit:
            held[commit] = manifest_path.parent.name
    return held


def move_to_current_ids(paths: Paths) -> dict[str, str]:
    """Give every fetched snapshot the id snapshot_id_of forms today (ids were once formed from the
    committer's local date, not the UTC date): OUT/raw/<old> becomes OUT/raw/<new>, its files hard
    links, its manifest naming the new id. Returns old -> new. A stop halfway leaves both folders and
    the next run finishes the move."""
    moved = {}
    for manifest_path in sorted(paths.raw_dir.glob(f"*/{MANIFEST}")):
        old = manifest_path.parent
        if old.name.startswith("."):
            continue
        manifest = load_json_strict(manifest_path)
        new_id = check_snapshot_id(snapshot_id_of(manifest.get("upstream", {}), manifest["files"]))
        if new_id == old.name:
            continue
        target = paths.raw_snapshot(new_id)
        if not (target / MANIFEST).is_file():
            staging = paths.raw_dir / f".staging-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(old, staging, copy_function=os.link)
            # Replaced by rename, so the manifest linked from the old folder is not written through.
            write_bytes_atomic(staging / MANIFEST, (json.dumps({**manifest, "snapshot_id": new_id}, indent=2)
                                                    + "\n").encode())
            replace_directory(staging, target)
        shutil.rmtree(old)
        moved[old.name] = new_id
    pointer = paths.latest_snapshot_pointer
    if pointer.is_file() and (named := pointer.read_text(encoding="utf-8").strip()) in moved:
        write_bytes_atomic(pointer, f"{moved[named]}\n".encode())
    return moved


def stale_published_ids(paths: Paths) -> dict[str, str]:
    """Snapshots of the published build under an id other than the one snapshot_id_of forms from
    their commit facts: old id -> current id."""
    import pyarrow.parquet as pq

    # After move_to_current_ids every fetched snapshot's folder has its current id: only a published
    # snapshot with no folder of its name can have an id of an earlier rule.
    held = {folder.name for folder in paths.raw_dir.iterdir()} if paths.raw_dir.is_dir() else set()
    files = {s: path for s, path in Paths(paths.out).parquet_files("snapshots").items() if s not in held}
    if not files:
        return {}
    rows = pq.read_table([str(path) for path in files.values()], columns=["snapshot_id", "commit", "commit_time"],
                         partitioning=None)
    stale = {}
    for row in rows.to_pylist():
        if not (row["commit"] and row["commit_time"]):
            continue
        current = snapshot_id_of({"commit": row["commit"], "commit_time": row["commit_time"].isoformat()}, [])
        if current != row["snapshot_id"]:
            stale[row["snapshot_id"]] = current
    return stale


def _with_commit_time(upstream: dict[str, Any], commit_time: str | None, source: str) -> dict[str, Any]:
    """The upstream facts with a commit time given on the command line, which must not contradict them."""
    if commit_time is None:
        return upstream
    if upstream.get("commit_time") not in (None, commit_time):
        raise PipelineError(
            f"{source}: --commit-time {commit_time} contradicts its snapshot.json ({upstream['commit_time']})"
        )
    if not _is_commit_time(commit_time):
        raise PipelineError(f"--commit-time {commit_time!r} is not an ISO 8601 time")
    return {**upstream, "commit_time": commit_time}
