"""Fetch: copy one upstream snapshot (a local public/data directory or an http(s) URL of one) into
OUT/raw/<snapshot-id>/ with a manifest of what was fetched, from where, and when.

The fetched snapshot is an archive that belongs to OUT: its files are copies, never links to files
someone else can edit, and a published snapshot's files and manifest never change. Content that
differs from what was published before under the same snapshot id is refused, naming the files.
"""

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.errors import NEXT_STEP, PipelineError, command_name
from pipeline.files import load_json_strict, replace_directory, write_bytes_atomic
from pipeline.paths import Paths
from schemas import dictionary
from schemas.rules import MODEL_ID_PATTERN

DEFAULT_SOURCE = (
    "https://raw.githubusercontent.com/ml-energy/leaderboard/7885788e837b80ad172e02e6e8c47e8d0b85520e/public/data"
)
# Wall-clock deadlines for a URL: one per file and one for the whole fetch; a server that trickles
# bytes extends neither.
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_FETCH_DEADLINE_S = 900.0
# The largest upstream file today is 0.4 MB, and 406 MB at the benchmark's 1000x scale; 1 GiB leaves
# room for that and still stops an endless body.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024 * 1024
MANIFEST = "manifest.json"
# snapshot.json is written beside the shared snapshots (not by the upstream) with the commit facts.
COMMIT_FACTS = "snapshot.json"
COMMIT_FACT_KEYS = ("repository", "commit", "commit_time", "commit_subject", "tasks_last_commit_date")
# A task name and a snapshot id become folder and file names: the dictionary declares their alphabet.
TASK_NAME_PATTERN = re.compile(dictionary.table_columns("tasks")["task"]["matches"])
PINNED_COMMIT_PATTERN = re.compile(r"/([0-9a-f]{40})/")
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
FICLONE = 0x40049409  # linux/fs.h: share a file's blocks copy-on-write where the file system can


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


class _SameSchemeRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to http(s) on the same host; anything else is reported, not followed."""

    def http_error_302(self, req, fp, code, msg, headers):  # type: ignore[no-untyped-def]
        target = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(target)
        if new.scheme not in ("http", "https") or new.hostname != old.hostname:
            raise PipelineError(f"{req.full_url}: refused redirect to {target} (only http(s) on the same host)")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class _HttpReader:
    """Streams each file to disk while counting and hashing it. Every socket wait is bounded by the
    time left before the file's and the fetch's deadlines, so memory stays flat and a trickling
    server cannot hold the fetch (and the lock) past them."""

    def __init__(self, base_url: str, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self.max_file_bytes = max_file_bytes
        self.fetch_deadline_s = fetch_deadline_s
        self.fetch_deadline = time.monotonic() + fetch_deadline_s
        self.opener = urllib.request.build_opener(_SameSchemeRedirects())

    def _time_left(self, url: str, file_deadline: float) -> float:
        now = time.monotonic()
        if now >= self.fetch_deadline:
            raise PipelineError(f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline")
        if now >= file_deadline:
            raise PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s")
        return min(file_deadline, self.fetch_deadline) - now

    def download(self, relative: str, target: Path) -> dict[str, Any]:
        """Write one file to `target`; return its manifest entry."""
        url = self.base_url + urllib.parse.quote(relative)
        file_deadline = time.monotonic() + self.timeout_s
        target.parent.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        try:
            with self.opener.open(url, timeout=self._time_left(url, file_deadline)) as response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > self.max_file_bytes:
                    raise PipelineError(
                        f"{url}: larger than the size cap of {self.max_file_bytes} bytes (Content-Length "
                        f"{declared}); raise --max-file-bytes if that is expected"
                    )
                connection = getattr(getattr(response, "fp", None), "raw", None)
                sock = getattr(connection, "_sock", None)
                with open(target, "wb") as handle:
                    while True:
                        if sock is not None:
                            sock.settimeout(self._time_left(url, file_deadline))
                        # read1: at most one socket read, so the deadlines are checked between any two.
                        chunk = response.read1(READ_CHUNK)
                        if not chunk:
                            break
                        size += len(chunk)
                        if size > self.max_file_bytes:
                            raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes")
                        digest.update(chunk)
                        handle.write(chunk)
                        self._time_left(url, file_deadline)
        except urllib.error.HTTPError as error:
            raise PipelineError(f"{url}: HTTP {error.code} {error.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                if time.monotonic() >= self.fetch_deadline - 0.05:
                    raise PipelineError(
                        f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline"
                    ) from None
                raise PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s") from None
            raise PipelineError(f"{url}: {reason} (offline? a local copy works too: make SOURCE=<folder>)") from None
        return {"path": relative, "sha256": digest.hexdigest(), "size": size}


def _fetch_url(
    source: str, staging: Path, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Download a snapshot into `staging`: index.json, the task files it lists, the model files those imply."""
    scheme = urllib.parse.urlsplit(source).scheme
    if scheme not in ("http", "https"):
        raise PipelineError(f"{source}: only http:// and https:// URLs can be fetched")
    reader = _HttpReader(source, timeout_s, max_file_bytes, fetch_deadline_s)
    files: list[dict[str, Any]] = []

    def download_and_parse(name: str) -> Any:
        files.append(reader.download(name, staging / name))
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
    pinned = PINNED_COMMIT_PATTERN.search(urllib.parse.urlsplit(source).path + "/")
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
    """Copy one file into the archive and describe what was written (sha256 of the copy itself)."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        try:
            fcntl.ioctl(writer.fileno(), FICLONE, reader.fileno())
            cloned = True
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.EBADF):
                raise
            cloned = False
        if not cloned:
            data = reader.read()
            writer.write(data)
            return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
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
    if "commit_time" in known and not COMMIT_TIME_PATTERN.match(known["commit_time"]):
        raise PipelineError(f"{facts_path}: commit_time {known['commit_time']!r} is not an ISO 8601 time")
    return known


def _snapshot_id(upstream: dict[str, Any], files: list[dict[str, Any]]) -> str:
    commit = upstream.get("commit")
    if commit and upstream.get("commit_time"):
        return f"{upstream['commit_time'][:10]}-{commit[:7]}"
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
) -> FetchResult:
    """Bring `source` into OUT/raw/<snapshot-id>/. A local folder whose content is already there is
    only read where its files' stat changed, and nothing is written."""
    staging = paths.raw_dir / f".staging-{os.getpid()}"
    if not _is_url(source):
        root = _check_local_source(source)
        names = _local_files(root)
        paths.raw_dir.mkdir(parents=True, exist_ok=True)
        upstream = _with_commit_time(_local_commit_facts(root), commit_time, source)
        files = _StatCache(paths).describe(root, names, max_file_bytes)
        recorded_source = str(root.resolve())
    try:
        if _is_url(source) or not _check_same_content(paths, _snapshot_id(upstream, files), upstream, files):
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            if _is_url(source):
                upstream, files = _fetch_url(source, staging, timeout_s, max_file_bytes, fetch_deadline_s)
                upstream = _with_commit_time(upstream, commit_time, source)
                recorded_source = source
            else:
                copied = _copy_local(root, staging, names)
                if copied != files:
                    changing = ", ".join(_differing_files(files, copied)[:5])
                    raise PipelineError(f"{source}: files changed while they were being fetched ({changing}); run again")
        snapshot_id = check_snapshot_id(_snapshot_id(upstream, files))
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


def _with_commit_time(upstream: dict[str, Any], commit_time: str | None, source: str) -> dict[str, Any]:
    """The upstream facts with a commit time given on the command line, which must not contradict them."""
    if commit_time is None:
        return upstream
    if upstream.get("commit_time") not in (None, commit_time):
        raise PipelineError(
            f"{source}: --commit-time {commit_time} contradicts its snapshot.json ({upstream['commit_time']})"
        )
    if not COMMIT_TIME_PATTERN.match(commit_time):
        raise PipelineError(f"--commit-time {commit_time!r} is not an ISO 8601 time")
    return {**upstream, "commit_time": commit_time}
