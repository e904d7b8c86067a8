"""Publish a refresh all at once: build in a private generation folder, then switch one symlink.

Readers open OUT/energy_index.duckdb, OUT/parquet and OUT/index, fixed links into OUT/current, which
points at one complete generation. A new generation starts as hard links to the published files and
every step replaces files rather than writing them in place, so the published build is never touched;
`current` moves by an atomic rename only when every step succeeded. The previous generation is kept
until the next publish, so a reader that opened it before the switch keeps a consistent view. Every
command that writes into OUT holds its lock (exclusive_lock), so writers never interleave.
"""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.files import atomic_path, write_json_atomic
from pipeline.fingerprint import file_sha256
from pipeline.paths import PARQUET_FILE, PUBLISHED_OUTPUTS, Paths
from pipeline.published import FILE_RECORD, recorded_files

STAGING_PREFIX = "staging-"
# In a generation made by refresh or history: the snapshots, parameters and code it was made from. They
# write it last; any other write makes it unknown, so a new generation starts without it.
REFRESH_RECORD = "refresh.json"
# In a generation whose Parquet files are all typed for readers (_type_for_readers).
TYPED_FOR_READERS = "typed-for-readers"
# In a generation whose Parquet files all carry their snapshot's place in the history (_order_for_readers).
ORDERED_FOR_READERS = "ordered-for-readers"


@contextmanager
def exclusive_lock(paths: Paths) -> Iterator[None]:
    """One command at a time per output folder; a second one stops with a clear message. Folders made
    for the lock alone (a mistyped --out, a step that found nothing to do) are removed again."""
    import fcntl

    made = next((folder for folder in reversed([paths.out, *paths.out.parents]) if not folder.exists()), None)
    paths.out.mkdir(parents=True, exist_ok=True)
    with open(paths.lock_file, "a") as handle:  # "a": taking the lock leaves the file untouched
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineError(f"{paths.out}: another energy-index command is writing here (lock "
                                f"{paths.lock_file}); try again when it has finished") from None
        try:
            yield
        finally:
            if made is not None and all(p.is_dir() or p == paths.lock_file for p in made.rglob("*")):
                shutil.rmtree(made)  # nothing in it but the lock and empty folders


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
        _type_for_readers(staging)
        _order_for_readers(staging)
    else:
        staging.mkdir()
        for marker in (TYPED_FOR_READERS, ORDERED_FOR_READERS):  # every file of it is written by this code
            (staging / marker).touch()
    (staging / REFRESH_RECORD).unlink(missing_ok=True)
    try:
        yield paths.staged(staging)
        _publish(paths, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _type_for_readers(generation: Path) -> None:
    """Builds before the files were typed for readers (schemas.for_readers) stored the folder's key column
    as plain text, which pyarrow and pandas cannot read beside a hive folder name: the staged links to such
    files are replaced by typed copies, once (a marker in the generation says it is done; the published
    files stay as they are)."""
    import pyarrow.parquet as pq

    from schemas import for_readers

    marker = generation / TYPED_FOR_READERS
    if marker.is_file():
        return
    for path in sorted(generation.glob("parquet/*/*=*/" + PARQUET_FILE)):
        key = path.parent.name.partition("=")[0]
        schema = pq.read_schema(path)
        typed = for_readers(schema, key)
        if schema.field(key).type != typed.field(key).type or schema.metadata != typed.metadata:
            with atomic_path(path) as tmp:
                pq.write_table(pq.read_table(path, partitioning=None).cast(typed), tmp, compression="zstd")
    marker.touch()


def _order_for_readers(generation: Path) -> None:
    """Builds before the files carried their order column (paths.order_column) left a reader of the files
    only the folder names, which sort alphabetically, not in commit order; a refresh ingests only its own
    snapshot. The staged links to files without the column are replaced by copies with it, computed from
    the facts in the generation's own snapshots files, once (a marker in the generation says it is done).
    A snapshot whose snapshots file is missing is left as it is, and the marker with it: the refresh
    ingests a damaged file's snapshot again, and the next publish finds nothing left to do."""
    import pyarrow.parquet as pq

    from pipeline.archive import snapshot_ordered_at
    from pipeline.declared_tables import with_order_column
    from pipeline.paths import order_column

    marker = generation / ORDERED_FOR_READERS
    if marker.is_file():
        return
    ordered_at = {}
    for path in generation.glob(f"parquet/snapshots/snapshot_id=*/{PARQUET_FILE}"):
        (facts,) = pq.read_table(path, columns=["commit_time", "retrieved"], partitioning=None).to_pylist()
        ordered_at[path.parent.name.partition("=")[2]] = snapshot_ordered_at(facts["commit_time"], facts["retrieved"])
    complete = True
    for path in sorted(generation.glob("parquet/*/*=*/" + PARQUET_FILE)):
        table, snapshot_id = path.parent.parent.name, path.parent.name.partition("=")[2]
        if order_column(table) in pq.read_schema(path).names:
            continue
        if snapshot_id not in ordered_at:
            complete = False
            continue
        rows = with_order_column(table, pq.read_table(path, partitioning=None), ordered_at[snapshot_id])
        with atomic_path(path) as tmp:
            pq.write_table(rows, tmp, compression="zstd")
    if complete:
        marker.touch()


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _published_generations(paths: Paths) -> list[Path]:
    return sorted((p for p in paths.generations_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def published_generations(paths: Paths) -> list[Path]:
    """The published generations, oldest first: the last is OUT/current, the one before it (if any) the build
    published before, kept until the next publish."""
    return _published_generations(paths) if paths.generations_dir.is_dir() else []


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _record_files(staged: Path, published: Path | None) -> None:
    """Write the staged generation's FILE_RECORD. A file still hard-linked to the published one (the
    same inode) keeps its recorded digest; only the files this run wrote are read."""
    recorded = (recorded_files(published) if published is not None else None) or {}
    files = {}
    for path in sorted(staged.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name == FILE_RECORD:
            continue
        name, stat = path.relative_to(staged).as_posix(), path.stat()
        before = _stat_or_none(published / name) if name in recorded else None
        same = before is not None and os.path.samestat(stat, before)
        files[name] = recorded[name] if same else (stat.st_size, file_sha256(path))
    write_json_atomic(staged / FILE_RECORD, {"files": files})


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
    for name in PUBLISHED_OUTPUTS:  # fixed links into current, made by the first publish
        if not (link := paths.out / name).is_symlink():
            os.symlink(Path("current") / name, link)
    _fsync_directory(paths.out)

    for retired in [g for g in _published_generations(paths) if g != final][:-1]:
        shutil.rmtree(retired, ignore_errors=True)
