"""What the commands that read the published build check first: its files against the size and sha256
each had when it was published (FILE_RECORD, written by publish.py). Light on imports (the standard
library's json, no msgspec), so that a quick `sql` pays a stat per file and no more."""

import json
import os
import time
from contextlib import suppress

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


def check_published(paths: Paths, *, full: bool = False) -> None:
    """Refuse, in one line, to read published files that differ from what was published (missing, another
    size, another sha256) or that cannot be vouched for (no readable record). Files whose stat a reader
    already vouched for are not read again, unless `full` (a release or a report: what others take in)."""
    if not paths.current.is_dir():
        return  # nothing published: the command says so itself
    generation = paths.current.resolve()
    try:
        recorded = {name: (int(size), str(digest)) for name, (size, digest) in
                    json.loads((generation / FILE_RECORD).read_bytes())["files"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        raise PipelineError(f"{generation / FILE_RECORD} is missing or unreadable, so the published files cannot "
                            f"be checked; {NEXT_STEP} to publish them again") from None
    checked: dict[str, tuple[int, ...]] = {}
    if not full:
        with suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            cache = json.loads((paths.generations_dir / CHECKED).read_bytes())
            if cache["generation"] == generation.name:
                checked = {name: tuple(key) for name, key in cache["files"].items()}
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
        _write_quietly(paths.generations_dir / CHECKED, {"generation": generation.name, "files": vouched})


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
