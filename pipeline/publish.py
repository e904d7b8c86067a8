"""Publish a refresh all at once: build in a private generation folder, then switch one symlink.

Readers open OUT/energy_index.duckdb, OUT/parquet and OUT/index, fixed links into OUT/current, which
points at one complete generation. A new generation starts as hard links to the published files and
every step replaces files rather than writing them in place, so the published build is never touched;
`current` moves by an atomic rename only when every step succeeded. The previous generation is kept
until the next publish, so a reader that opened it before the switch keeps a consistent view.
"""

import os
import shutil
from pathlib import Path

from pipeline.paths import HIVE_KEY, PARQUET_FILE, PUBLISHED_OUTPUTS, Paths

STAGING_PREFIX = "staging-"


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
        target = legacy.parent / f"{HIVE_KEY}={legacy.stem}" / PARQUET_FILE
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


def publish(staged: Paths) -> Path:
    """Make the staged generation the published one; return its folder."""
    assert staged.generation is not None
    paths = Paths(staged.out)
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
