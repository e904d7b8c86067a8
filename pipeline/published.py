"""The published files' one check: each against the size and sha256 it had when it was published
(FILE_RECORD, written by publish.py): the refresh and verify ask which are damaged (damaged_files); the
commands that read the published build refuse to read damaged ones (check_published). Light on imports (the
standard library's json, no msgspec), so that a quick `sql` pays a stat per file and no more."""

import json
import os
import time
from collections.abc import Collection, Mapping
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.fingerprint import file_sha256
from pipeline.paths import Paths

# In every published generation: each file's size and sha256 as published, so that a refresh with
# nothing to do, and every reader, can tell that what is published is intact.
FILE_RECORD = "published-files.json"
# In OUT/.generations: the stat (size, mtime and ctime in ns, inode) of each published file of one
# generation whose sha256 a reader found as recorded, so that the next reader stats them and reads none.
# A file touched within RACY_WINDOW_NS of the check could change again within the same timestamp tick:
# left out (git's rule).
CHECKED = ".checked-files.json"
RACY_WINDOW_NS = 2_000_000_000

StatKey = tuple[int, ...]  # size, mtime and ctime in ns, inode


class _Inspection(NamedTuple):
    damaged: list[tuple[str, str]]  # (path relative to the generation, what is wrong), by path
    intact: dict[str, StatKey]  # the stat of each file found as published, but those touched within RACY_WINDOW_NS


def recorded_files(generation: Path) -> dict[str, tuple[int, str]] | None:
    """A published generation's FILE_RECORD: each file's size and sha256 as published; None when it is missing
    or unreadable."""
    try:
        files = json.loads((generation / FILE_RECORD).read_bytes())["files"]
        recorded = {name: (size, digest) for name, (size, digest) in files.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    well_typed = all(type(size) is int and isinstance(digest, str) for size, digest in recorded.values())
    return recorded if well_typed else None


def damaged_files(paths: Paths, names: Collection[str] | None = None) -> list[tuple[str, str]] | None:
    """The published files (of `names` when given, paths relative to the generation) that differ from what
    was published, as (path relative to the generation, what is wrong): missing, another size, or another
    sha256. None when the generation has no readable record (the record itself missing or damaged): then
    nothing can be vouched for."""
    if not paths.current.is_dir():
        return []
    return None if (found := _inspect(paths.current.resolve(), names)) is None else found.damaged


def _inspect(generation: Path, names: Collection[str] | None = None,
             checked: Mapping[str, StatKey] | None = None) -> _Inspection | None:
    """The one check of a generation's files (damaged_files, check_published): each of `names` (all when
    None) against its record, read unless `checked` (a reader's CHECKED) holds its stat. None when the
    record is missing or unreadable."""
    if (recorded := recorded_files(generation)) is None:
        return None
    wanted = sorted(name for name in recorded if names is None or name in names)
    folder = os.open(generation, os.O_RDONLY | os.O_DIRECTORY)  # stats relative to it: no path walked twice
    try:
        stats = {name: _stat_at(folder, name) for name in wanted}
    finally:
        os.close(folder)
    found, racy_after = _Inspection([], {}), time.time_ns() - RACY_WINDOW_NS
    for name in wanted:
        (size, digest), stat = recorded[name], stats[name]
        if stat is None:
            found.damaged.append((name, "missing"))
            continue
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        if stat.st_size != size:
            found.damaged.append((name, f"{stat.st_size:,} bytes, published with {size:,}"))
        elif (checked or {}).get(name) != key and file_sha256(generation / name) != digest:
            found.damaged.append((name, "its content differs from what was published (sha256)"))
        elif max(stat.st_mtime_ns, stat.st_ctime_ns) < racy_after:
            found.intact[name] = key
    return found


def check_published(paths: Paths, *, full: bool = False) -> None:
    """Refuse, in one line, to read published files that differ from what was published (missing, another
    size, another sha256) or that cannot be vouched for (no readable record). Files whose stat a reader
    already vouched for are not read again, unless `full` (a release or a report: what others take in)."""
    if not paths.current.is_dir():
        return  # nothing published: the command says so itself
    generation = paths.current.resolve()
    checked: dict[str, StatKey] = {}
    if not full:
        with suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            cache = json.loads((paths.generations_dir / CHECKED).read_bytes())
            if cache["generation"] == generation.name:
                checked = {name: tuple(key) for name, key in cache["files"].items()}
    if (found := _inspect(generation, checked=checked)) is None:
        raise PipelineError(f"{generation / FILE_RECORD} is missing or unreadable, so the published files cannot "
                            f"be checked; {NEXT_STEP} to publish them again")
    if damaged := found.damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise PipelineError(f"{paths.current / damaged[0][0]}: {damaged[0][1]}{more}; the published files are "
                            f"damaged, so nothing is read from them; {NEXT_STEP} to build them again")
    if found.intact != checked:
        _write_quietly(paths.generations_dir / CHECKED, {"generation": generation.name, "files": found.intact})


def _stat_at(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None


def _write_quietly(target: os.PathLike[str], document: dict) -> None:
    """Replace `target` atomically; a folder this reader may not write in is checked each time instead."""
    temporary = f"{os.fspath(target)}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        os.replace(temporary, target)
    except OSError:
        with suppress(OSError):
            os.remove(temporary)
