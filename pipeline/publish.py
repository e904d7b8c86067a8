"""Publish a refresh all at once: build in a private generation folder, then switch one symlink.

Readers open OUT/energy_index.duckdb, OUT/parquet and OUT/index, fixed links into OUT/current, which
points at one complete generation. A new generation starts as hard links to the published files and
every step replaces files rather than writing them in place, so the published build is never touched;
`current` moves by an atomic rename only when every step succeeded. The previous generation is kept
until the next publish, so a reader that opened it before the switch keeps a consistent view.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

from pipeline.paths import PARQUET_FILE, PUBLISHED_OUTPUTS, Paths, hive_key

STAGING_PREFIX = "staging-"
# In every published generation: each file's size and sha256 as published, so that a refresh with
# nothing to do can tell that what it leaves published is intact.
FILE_RECORD = "published-files.json"


def _link_copy(source: Path, target: Path) -> None:
    """Recreate `source` at `target` with hard links: no bytes copied, no inode shared for writing."""
    shutil.copytree(source, target, copy_function=os.link, symlinks=True)


def begin(paths: Paths) -> Paths:
    """A private generation seeded with the published files. The caller holds the refresh lock."""
    paths.generations_dir.mkdir(parents=True, exist_ok=True)
    for leftover in paths.generations_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    staging = paths.generations_dir / f"{STAGING_PREFIX}{os.getpid()}"
    if paths.current.is_dir():
        _link_copy(paths.current.resolve(), staging)
        _move_to_hive_layout(staging / "parquet")
    else:
        staging.mkdir()
    return paths.staged(staging)


def _move_to_hive_layout(parquet: Path) -> None:
    """Builds before the hive layout kept <table>/<id>.parquet; the staged links move to
    <table>/snapshot_id=<id>/data.parquet (the published files stay where they are)."""
    for legacy in sorted(parquet.glob("*/*.parquet")):
        if legacy.name == PARQUET_FILE:
            continue  # a reference table's one file (<table>/data.parquet), never per snapshot
        target = legacy.parent / f"{hive_key(legacy.parent.name)}={legacy.stem}" / PARQUET_FILE
        target.parent.mkdir(exist_ok=True)
        os.replace(legacy, target)


def abandon(staged: Paths) -> None:
    if staged.generation is not None:
        shutil.rmtree(staged.generation, ignore_errors=True)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _published_generations(paths: Paths) -> list[Path]:
    return sorted(
        (p for p in paths.generations_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _generation_files(generation: Path) -> list[Path]:
    return sorted(p for p in generation.rglob("*") if p.is_file() and not p.is_symlink() and p.name != FILE_RECORD)


def _record_files(staged: Path, published: Path | None) -> None:
    """Write the staged generation's FILE_RECORD. A file still hard-linked to the published one (the
    same inode) keeps its recorded digest; only the files this run wrote are read."""
    recorded: dict[str, list] = {}
    if published is not None:
        try:
            recorded = json.loads((published / FILE_RECORD).read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError):
            recorded = {}
    files = {}
    for path in _generation_files(staged):
        name = path.relative_to(staged).as_posix()
        stat = path.stat()
        before = _stat_or_none(published / name) if published is not None else None
        if name in recorded and before is not None and os.path.samestat(stat, before):
            files[name] = recorded[name]
        else:
            files[name] = [stat.st_size, _sha256(path)]
    (staged / FILE_RECORD).write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def damaged_files(paths: Paths) -> list[tuple[str, str]] | None:
    """The published files that differ from what was published, as (path relative to the generation,
    what is wrong): missing, another size, or another sha256. None when the generation has no readable
    record (published by older code, or the record itself damaged): then nothing can be vouched for."""
    if not paths.current.is_dir():
        return []
    generation = paths.current.resolve()
    try:
        recorded = json.loads((generation / FILE_RECORD).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError):
        return None
    damaged = []
    for name, (size, digest) in sorted(recorded.items()):
        path = generation / name
        stat = _stat_or_none(path)
        if stat is None:
            damaged.append((name, "missing"))
        elif stat.st_size != size:
            damaged.append((name, f"{stat.st_size:,} bytes, published with {size:,}"))
        elif _sha256(path) != digest:
            damaged.append((name, "its content differs from what was published (sha256)"))
    return damaged


def publish(staged: Paths) -> Path:
    """Make the staged generation the published one; return its folder."""
    assert staged.generation is not None
    paths = Paths(staged.out)
    _record_files(staged.generation, paths.current.resolve() if paths.current.is_dir() else None)
    existing = _published_generations(paths)
    number = int(existing[-1].name) + 1 if existing else 1
    final = paths.generations_dir / f"{number:06d}"
    os.rename(staged.generation, final)
    _fsync_directory(paths.generations_dir)

    pointer = paths.out / f".current-{os.getpid()}"
    pointer.unlink(missing_ok=True)
    os.symlink(final.relative_to(paths.out), pointer)
    os.replace(pointer, paths.current)
    for name in PUBLISHED_OUTPUTS:
        link = paths.out / name
        if link.is_symlink():
            continue
        if link.is_dir():
            shutil.rmtree(link)
        elif link.exists():
            link.unlink()
        os.symlink(Path("current") / name, link)
    _fsync_directory(paths.out)

    previous = [g for g in _published_generations(paths) if g != final]
    for retired in previous[:-1]:
        shutil.rmtree(retired, ignore_errors=True)
    return final
