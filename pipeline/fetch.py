"""Fetching a snapshot into the raw archive (pipeline/archive.py): `fetch` is the one entry point for a
source, and decides whether it is a URL or a local folder. A local snapshot folder (the upstream's
public/data layout, with snapshot.json beside it when its commit is known) is read here; a URL, and the
upstream's commits, by pipeline/upstream.py (the HTTP client, the GitHub follower)."""

import hashlib
import os
import time
from pathlib import Path
from typing import TypedDict

from pipeline.archive import (
    COMMIT_FACTS, RACY_WINDOW_NS, FetchResult, FileEntry, checked_time, held_already, named_files, read_stat_cache,
    snapshot_id_of, staging_folder, stat_key, store, with_commit_time, write_stat_cache,
)
from pipeline.errors import PipelineError, command_name
from pipeline.files import read_typed
from pipeline.paths import Paths
from pipeline.settings import (
    COMMIT_PATTERN, DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES, DEFAULT_TIMEOUT_S, is_url,
)

_CommitFacts = TypedDict("_CommitFacts", {key: str | None for key in (
    "repository", "commit", "commit_time", "commit_subject", "tasks_last_commit_date")}, total=False)


def fetch(source: str, paths: Paths, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, fetch_deadline_s: float = DEFAULT_FETCH_DEADLINE_S,
          commit_time: str | None = None, full_check: bool = False) -> FetchResult:
    """Bring the snapshot folder `source`, a URL or a local folder, into OUT/raw/<snapshot-id>/ (a held copy
    checked by stat, or `full_check` by sha256 too, and fetched again when damaged). The timeout and the
    deadline bound a fetch by URL."""
    if is_url(source):
        from pipeline.upstream import fetch_url

        return fetch_url(source, paths, timeout_s=timeout_s, max_file_bytes=max_file_bytes,
                         fetch_deadline_s=fetch_deadline_s, commit_time=commit_time, full_check=full_check)
    return fetch_folder(source, paths, max_file_bytes=max_file_bytes, commit_time=commit_time,
                        full_check=full_check)


def snapshot_sources(sources: list[str]) -> list[str]:
    """Each source as given, or, for a local folder of snapshot folders, each snapshot folder in it."""
    expanded = []
    for given in sources:
        folder = Path(given)
        if not is_url(given) and folder.is_dir() and not (folder / "index.json").exists():
            children = sorted(child for child in folder.iterdir() if child.is_dir() and not child.name.startswith("."))
            snapshots = [str(child) for child in children if (child / "index.json").is_file()]
            if not snapshots:
                raise PipelineError(f"{given}: neither a snapshot (no index.json) nor a folder of snapshots")
            # A snapshot folder that has lost its index.json is not passed over: the history would lack it.
            if lacking := [child.name for child in children if str(child) not in snapshots]:
                raise PipelineError(f"{given}: snapshot folder(s) {', '.join(lacking)} have no index.json, though "
                                    f"the other {len(snapshots)} folder(s) there are snapshots; restore it, or name "
                                    "the snapshots to ingest one by one")
            expanded.extend(snapshots)
        else:
            expanded.append(given)
    return expanded


def fetch_folder(source: str, paths: Paths, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 commit_time: str | None = None, full_check: bool = False) -> FetchResult:
    """Bring the local snapshot folder `source` into OUT/raw/<snapshot-id>/ (a held copy checked by stat,
    or `full_check` by sha256 too, and copied again when damaged)."""
    with staging_folder(paths) as staging:
        upstream, files = _fetch_local(source, paths, staging, commit_time, max_file_bytes, full_check)
        return store(paths, staging, upstream, files, source=source, origin=str(Path(source).resolve()),
                     full_check=full_check)


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


def _fetch_local(source: str, paths: Paths, staging: Path, commit_time: str | None,
                 max_file_bytes: int, full_check: bool = False) -> tuple[dict[str, str], list[FileEntry]]:
    """The upstream facts and the files' manifest entries. When the stat cache vouches for every file and
    the archive holds them, nothing is read; otherwise all are copied into `staging` and hashed (the id may
    depend on their content)."""
    root, names = _local_files(source)
    upstream, origin = with_commit_time(_local_commit_facts(root), commit_time, source), str(root.resolve())
    cache = read_stat_cache(paths)
    cached = cache.get(origin, {})
    if all(cached.get(name, ())[:4] == stat_key((root / name).stat(), root / name, max_file_bytes) for name in names):
        files: list[FileEntry] = [{"path": name, "sha256": cached[name][4], "size": cached[name][0]} for name in names]
        if held_already(paths, snapshot_id_of(upstream, files), upstream, files, full_check):
            return upstream, files
    files, cache[origin] = _copy_local(root, names, staging, max_file_bytes)
    # As a commit's tree is (pipeline/upstream.py): a file its own index.json names and the folder lacks makes
    # the snapshot incomplete, refused before anything is kept (its rows would be dropped with a warning each).
    # Read from the copy, once per copy: a folder the stat cache vouches for was checked when it was copied. A
    # file too malformed to name the others is left to ingest, whose message says where it is malformed.
    listed = set(names)
    try:
        missing = [name for name in named_files(staging) if name not in listed]
    except (PipelineError, RecursionError):  # msgspec's for JSON nested deeper than it decodes
        missing = []
    if missing:
        more = f" and {len(missing) - 1} more" if missing[1:] else ""
        raise PipelineError(f"{source}: the folder lacks {missing[0]}{more}, which its own index.json names; an "
                            "incomplete snapshot is refused (nothing was kept)")
    write_stat_cache(paths, cache)
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
            before = stat_key(os.fstat(source.fileno()), path, max_file_bytes)
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                size += copy.write(chunk)
            if stat_key(os.fstat(source.fileno()), path, max_file_bytes) != before:
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
