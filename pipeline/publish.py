"""Publish a refresh all at once: build in a private generation folder, then switch one symlink.

Readers open OUT/energy_index.duckdb, OUT/parquet and OUT/index, fixed links into OUT/current, which
points at one complete generation. A new generation starts as hard links to the published files and
every step replaces files rather than writing them in place, so the published build is never touched;
`current` moves by an atomic rename only when every step succeeded. The previous generation is kept
until the next publish, so a reader that opened it before the switch keeps a consistent view.
"""

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import msgspec

from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.files import read_typed, write_json_atomic
from pipeline.fingerprint import file_sha256
from pipeline.paths import PARQUET_FILE, PUBLISHED_OUTPUTS, Paths, hive_key

STAGING_PREFIX = "staging-"
# In a generation made by refresh or history: the snapshots, parameters and code it was made from. They
# write it last; any other write makes it unknown, so a new generation starts without it.
REFRESH_RECORD = "refresh.json"
# In every published generation: each file's size and sha256 as published, so that a refresh with
# nothing to do can tell that what it leaves published is intact.
FILE_RECORD = "published-files.json"
# In OUT/generations: the stat (size, mtime and ctime in ns, inode) of each published file of one generation
# whose sha256 a reader found as recorded, so that the next reader stats them and reads none. A file touched
# within RACY_WINDOW_NS of the check could change again within the same timestamp tick: left out (git's rule).
CHECKED = ".checked-files.json"
RACY_WINDOW_NS = 2_000_000_000


class _FileRecord(msgspec.Struct):
    files: dict[str, tuple[int, str]]  # path in the generation -> (size, sha256)


class _Checked(msgspec.Struct):
    generation: str
    files: dict[str, tuple[int, int, int, int]]


@contextmanager
def new_generation(paths: Paths) -> Iterator[Paths]:
    """Yield paths into a private generation seeded with hard links to the published files, published
    if the block succeeds and removed either way. The caller holds the lock."""
    paths.generations_dir.mkdir(parents=True, exist_ok=True)
    for leftover in paths.generations_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    staging = paths.generations_dir / f"{STAGING_PREFIX}{os.getpid()}"
    if paths.current.is_dir():
        shutil.copytree(paths.current.resolve(), staging, copy_function=os.link, symlinks=True)
        _move_to_hive_layout(staging / "parquet")
    else:
        staging.mkdir()
    (staging / REFRESH_RECORD).unlink(missing_ok=True)
    try:
        yield paths.staged(staging)
        _publish(paths, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_to_hive_layout(parquet: Path) -> None:
    """Builds before the hive layout kept <table>/<id>.parquet; the staged links move to
    <table>/snapshot_id=<id>/data.parquet (the published files stay where they are)."""
    for legacy in sorted(parquet.glob("*/*.parquet")):
        if legacy.name != PARQUET_FILE:  # a reference table's one file is never per snapshot
            target = legacy.parent / f"{hive_key(legacy.parent.name)}={legacy.stem}" / PARQUET_FILE
            target.parent.mkdir(exist_ok=True)
            os.replace(legacy, target)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _published_generations(paths: Paths) -> list[Path]:
    return sorted((p for p in paths.generations_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _recorded(generation: Path) -> dict[str, tuple[int, str]] | None:
    try:
        return read_typed(generation / FILE_RECORD, _FileRecord).files
    except (OSError, PipelineError):
        return None


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _stat_at(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None


def _record_files(staged: Path, published: Path | None) -> None:
    """Write the staged generation's FILE_RECORD. A file still hard-linked to the published one (the
    same inode) keeps its recorded digest; only the files this run wrote are read."""
    recorded = (_recorded(published) if published is not None else None) or {}
    files = {}
    for path in sorted(staged.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name == FILE_RECORD:
            continue
        name, stat = path.relative_to(staged).as_posix(), path.stat()
        before = _stat_or_none(published / name) if name in recorded else None
        same = before is not None and os.path.samestat(stat, before)
        files[name] = recorded[name] if same else (stat.st_size, file_sha256(path))
    write_json_atomic(staged / FILE_RECORD, {"files": files})


def damaged_files(paths: Paths) -> list[tuple[str, str]] | None:
    """The published files that differ from what was published, as (path relative to the generation,
    what is wrong): missing, another size, or another sha256. None when the generation has no readable
    record (published by older code, or the record itself damaged): then nothing can be vouched for."""
    if not paths.current.is_dir():
        return []
    generation = paths.current.resolve()
    if (recorded := _recorded(generation)) is None:
        return None
    damaged = []
    for name, (size, digest) in sorted(recorded.items()):
        path = generation / name
        if (stat := _stat_or_none(path)) is None:
            damaged.append((name, "missing"))
        elif stat.st_size != size:
            damaged.append((name, f"{stat.st_size:,} bytes, published with {size:,}"))
        elif file_sha256(path) != digest:
            damaged.append((name, "its content differs from what was published (sha256)"))
    return damaged


def check_published(paths: Paths, *, full: bool = False) -> None:
    """Refuse, in one line, to read published files that differ from what was published (missing, another
    size, another sha256) or that cannot be vouched for (no readable record). Files whose stat a reader
    already vouched for are not read again, unless `full` (a release or a report: what others take in)."""
    if not paths.current.is_dir():
        return  # nothing published: the command says so itself
    generation = paths.current.resolve()
    if (recorded := _recorded(generation)) is None:
        raise PipelineError(f"{generation / FILE_RECORD} is missing or unreadable, so the published files cannot "
                            f"be checked; {NEXT_STEP} to publish them again")
    checked: dict[str, tuple[int, int, int, int]] = {}
    if not full:
        with suppress(OSError, PipelineError):
            cache = read_typed(paths.generations_dir / CHECKED, _Checked)
            checked = cache.files if cache.generation == generation.name else {}
    damaged, vouched, racy_after = [], {}, time.time_ns() - RACY_WINDOW_NS
    folder = os.open(generation, os.O_RDONLY | os.O_DIRECTORY)  # stats relative to it: no path walked twice
    try:
        stats = {name: _stat_at(folder, name) for name in recorded}
    finally:
        os.close(folder)
    for name, (size, digest) in sorted(recorded.items()):
        if (stat := stats[name]) is None:
            damaged.append((name, "missing"))
            continue
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        if stat.st_size != size:
            damaged.append((name, f"{stat.st_size:,} bytes, published with {size:,}"))
        elif checked.get(name) != key and file_sha256(generation / name) != digest:
            damaged.append((name, "its content differs from what was published (sha256)"))
        elif max(stat.st_mtime_ns, stat.st_ctime_ns) < racy_after:
            vouched[name] = key
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise PipelineError(f"{paths.current / damaged[0][0]}: {damaged[0][1]}{more}; the published files are "
                            f"damaged, so nothing is read from them; {NEXT_STEP} to build them again")
    if vouched != checked:
        with suppress(OSError):  # a published folder that is read-only to this reader is checked each time
            write_json_atomic(paths.generations_dir / CHECKED, {"generation": generation.name, "files": vouched})


def _publish(paths: Paths, staging: Path) -> None:
    """Make the staged generation the published one."""
    _record_files(staging, paths.current.resolve() if paths.current.is_dir() else None)
    existing = _published_generations(paths)
    final = paths.generations_dir / f"{int(existing[-1].name) + 1 if existing else 1:06d}"
    os.rename(staging, final)
    _fsync_directory(paths.generations_dir)

    pointer = paths.out / f".current-{os.getpid()}"
    pointer.unlink(missing_ok=True)
    os.symlink(final.relative_to(paths.out), pointer)
    os.replace(pointer, paths.current)
    for name in PUBLISHED_OUTPUTS:  # fixed links into current (an output of older code may stand there)
        link = paths.out / name
        if not link.is_symlink():
            if link.is_dir():
                shutil.rmtree(link)
            link.unlink(missing_ok=True)
            os.symlink(Path("current") / name, link)
    _fsync_directory(paths.out)

    for retired in [g for g in _published_generations(paths) if g != final][:-1]:
        shutil.rmtree(retired, ignore_errors=True)
