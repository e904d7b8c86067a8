"""Fetch: copy one upstream snapshot (a local public/data directory or an http(s) URL of one) into
OUT/raw/<snapshot-id>/ with a manifest of what was fetched, from where, and when."""

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

from pipeline.errors import PipelineError
from pipeline.files import load_json_strict, replace_directory, write_bytes_atomic
from pipeline.paths import Paths
from schemas.rules import MODEL_ID_PATTERN

DEFAULT_SOURCE = (
    "https://raw.githubusercontent.com/ml-energy/leaderboard/7885788e837b80ad172e02e6e8c47e8d0b85520e/public/data"
)
DEFAULT_TIMEOUT_S = 30.0
# The largest upstream file today is 0.4 MB, and 406 MB at the benchmark's 1000x scale; 1 GiB leaves
# room for that and still stops an endless body.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024 * 1024
MANIFEST = "manifest.json"
# snapshot.json is written beside the shared snapshots (not by the upstream) with the commit facts.
COMMIT_FACTS = "snapshot.json"
COMMIT_FACT_KEYS = ("repository", "commit", "commit_time", "commit_subject", "tasks_last_commit_date")
TASK_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")
PINNED_COMMIT_PATTERN = re.compile(r"/([0-9a-f]{40})/")
SNAPSHOT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{7,40}$")
COMMIT_TIME_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}T")


@dataclass(frozen=True)
class FetchResult:
    snapshot_id: str
    directory: Path
    file_count: int
    total_bytes: int
    changed: bool


def _is_url(source: str) -> bool:
    return "://" in source


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model_file_name(model_id: str, task: str) -> str:
    return f"{model_id.replace('/', '__')}__{task}.json"


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
    def __init__(self, base_url: str, timeout_s: float, max_file_bytes: int) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self.max_file_bytes = max_file_bytes
        self.opener = urllib.request.build_opener(_SameSchemeRedirects())

    def read(self, relative: str) -> bytes:
        url = self.base_url + urllib.parse.quote(relative)
        deadline = time.monotonic() + self.timeout_s
        try:
            with self.opener.open(url, timeout=self.timeout_s) as response:
                chunks, size = [], 0
                while chunk := response.read(1 << 16):
                    size += len(chunk)
                    if size > self.max_file_bytes:
                        raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes")
                    if time.monotonic() > deadline:
                        raise PipelineError(f"{url}: not received within the {self.timeout_s:g} s timeout")
                    chunks.append(chunk)
                return b"".join(chunks)
        except urllib.error.HTTPError as error:
            raise PipelineError(f"{url}: HTTP {error.code} {error.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise PipelineError(f"{url}: {reason} (offline? a local copy works too: --source <folder>)") from None


def _parse_fetched(name: str, data: bytes, staging: Path) -> Any:
    path = staging / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return load_json_strict(path, name)


def _fetch_url(source: str, staging: Path, timeout_s: float, max_file_bytes: int) -> dict[str, Any]:
    scheme = urllib.parse.urlsplit(source).scheme
    if scheme not in ("http", "https"):
        raise PipelineError(f"{source}: only http:// and https:// URLs can be fetched")
    reader = _HttpReader(source, timeout_s, max_file_bytes)
    index = _parse_fetched("index.json", reader.read("index.json"), staging)
    tasks = index.get("tasks") if isinstance(index, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(t, str) and TASK_NAME_PATTERN.match(t) for t in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in tasks:
        name = f"tasks/{task}.json"
        document = _parse_fetched(name, reader.read(name), staging)
        rows = document.get("configurations") if isinstance(document, dict) else None
        if not isinstance(rows, list):
            raise PipelineError(f"{name}: field 'configurations' must be a list")
        model_ids = sorted({row.get("model_id") for row in rows if isinstance(row, dict)}, key=str)
        for model_id in model_ids:
            if not isinstance(model_id, str) or not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            model_name = f"models/{_model_file_name(model_id, task)}"
            _parse_fetched(model_name, reader.read(model_name), staging)
    pinned = PINNED_COMMIT_PATTERN.search(urllib.parse.urlsplit(source).path + "/")
    return {"commit": pinned.group(1)} if pinned else {}


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


def _place_described(source: Path, target: Path, name: str, link: bool) -> dict[str, Any]:
    """Hard-link (where allowed) or copy one file, hashing its bytes on the way (one read)."""
    with open(source, "rb") as handle:
        data = handle.read()
    if link:
        try:
            os.link(source, target)
            return {"path": name, "sha256": _sha256(data), "size": len(data)}
        except OSError:
            pass  # another file system, or not allowed: copy
    # os-level writes: on many small files, twice as fast as Path.write_bytes here.
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
    finally:
        os.close(descriptor)
    return {"path": name, "sha256": _sha256(data), "size": len(data)}


def _local_listing(source: str, max_file_bytes: int) -> tuple[Path, list[str]]:
    root = Path(source)
    if not (root / "index.json").is_file():
        raise PipelineError(f"{source}: not a snapshot directory (no index.json); expected the upstream public/data layout")
    names = _local_files(root)
    for name in names:
        if (root / name).stat().st_size > max_file_bytes:
            raise PipelineError(f"{root / name}: larger than the size cap of {max_file_bytes} bytes")
    return root, names


def _describe_local(root: Path, names: list[str]) -> list[dict[str, Any]]:
    files = []
    for name in names:
        data = (root / name).read_bytes()
        files.append({"path": name, "sha256": _sha256(data), "size": len(data)})
    return sorted(files, key=lambda entry: entry["path"])


def _place_local(root: Path, staging: Path, names: list[str], link: bool) -> list[dict[str, Any]]:
    """Bring a local snapshot into staging, hard-linked or copied. Returns the files' descriptions.

    A hard link costs no bytes and, on this machine, a fiftieth of the time of creating and writing
    a file. The sha256 in the manifest is checked again by every ingest, so an edit made in place to
    a linked source file is caught there ("changed since it was fetched") rather than used.
    """
    for folder in sorted({(staging / name).parent for name in names}):
        folder.mkdir(parents=True, exist_ok=True)
    files = [_place_described(root / name, staging / name, name, link) for name in names]
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


def _describe_files(staging: Path) -> list[dict[str, Any]]:
    files = []
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        data = path.read_bytes()
        files.append({"path": path.relative_to(staging).as_posix(), "sha256": _sha256(data), "size": len(data)})
    return files


def _snapshot_id(upstream: dict[str, Any], files: list[dict[str, Any]]) -> str:
    commit = upstream.get("commit")
    if commit and upstream.get("commit_time"):
        return f"{upstream['commit_time'][:10]}-{commit[:7]}"
    if commit:
        return commit[:7]
    listing = "".join(f"{f['path']}\0{f['sha256']}\n" for f in files)
    return f"local-{_sha256(listing.encode())[:12]}"


def check_snapshot_id(snapshot_id: str) -> str:
    if not SNAPSHOT_ID_PATTERN.match(snapshot_id):
        raise PipelineError(f"snapshot id {snapshot_id!r} is not a snapshot id (letters, digits, '.', '_', '-')")
    return snapshot_id


def read_manifest(snapshot_dir: Path) -> dict[str, Any]:
    manifest_path = snapshot_dir / MANIFEST
    if not manifest_path.is_file():
        raise PipelineError(f"{snapshot_dir}: no {MANIFEST}; fetch the snapshot first (energy-index fetch)")
    return load_json_strict(manifest_path)


def _latest_manifest(paths: Paths) -> dict[str, Any] | None:
    """The manifest of the snapshot the last fetch delivered, if it is still there."""
    try:
        return read_manifest(paths.raw_snapshot(latest_snapshot_id(paths)))
    except PipelineError:
        return None


def latest_snapshot_id(paths: Paths) -> str:
    pointer = paths.latest_snapshot_pointer
    if not pointer.is_file():
        raise PipelineError(f"{pointer}: missing; run 'energy-index fetch' first")
    return check_snapshot_id(pointer.read_text(encoding="utf-8").strip())


def fetch(
    source: str,
    paths: Paths,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    link: bool = True,
) -> FetchResult:
    """Bring `source` into OUT/raw/<snapshot-id>/ (a local folder's files hard-linked where possible,
    unless `link` is false); an unchanged snapshot keeps its manifest and files."""
    paths.raw_dir.mkdir(parents=True, exist_ok=True)
    staging = paths.raw_dir / f".staging-{os.getpid()}"
    try:
        if not _is_url(source):
            root, names = _local_listing(source, max_file_bytes)
            recorded_source = str(root.resolve())
            upstream = _local_commit_facts(root)
            latest = _latest_manifest(paths)
            # Fetched from here before: hash first, and write nothing if nothing changed.
            if latest and latest.get("source") == recorded_source and latest.get("upstream") == upstream:
                files = _describe_local(root, names)
                if files == latest["files"]:
                    return FetchResult(
                        latest["snapshot_id"], paths.raw_snapshot(latest["snapshot_id"]), len(files),
                        sum(f["size"] for f in files), changed=False,
                    )
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        if _is_url(source):
            upstream = _fetch_url(source, staging, timeout_s, max_file_bytes)
            recorded_source = source
            files = _describe_files(staging)
        else:
            files = _place_local(root, staging, names, link)
        snapshot_id = _snapshot_id(upstream, files)
        target = paths.raw_snapshot(snapshot_id)
        previous = read_manifest(target) if (target / MANIFEST).is_file() else None
        changed = previous is None or previous.get("files") != files or previous.get("source") != recorded_source
        if changed:
            manifest = {
                "snapshot_id": snapshot_id,
                "source": recorded_source,
                "retrieved": datetime.now(timezone.utc).date().isoformat(),
                "upstream": upstream,
                "files": files,
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            replace_directory(staging, target)
        write_bytes_atomic(paths.latest_snapshot_pointer, f"{snapshot_id}\n".encode())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return FetchResult(
        snapshot_id=snapshot_id,
        directory=target,
        file_count=len(files),
        total_bytes=sum(f["size"] for f in files),
        changed=changed,
    )
