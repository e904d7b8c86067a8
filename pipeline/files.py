"""Atomic writes and JSON reading: the ways the pipeline touches files."""

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from pipeline.errors import PipelineError


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a new empty file beside `target`, renamed over it only if the block succeeds. Made as cp makes
    a file, its mode follows the umask (mkstemp's is 0600), so readers running as another user can read it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.urandom(4).hex()}.tmp")
    tmp.touch(exist_ok=False)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(target: Path, data: bytes) -> bool:
    """Write `data` to `target` atomically, unless it already holds `data`; True when written."""
    with contextlib.suppress(FileNotFoundError):
        if target.stat().st_size == len(data) and target.read_bytes() == data:
            return False
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return True


def write_json_atomic(target: Path, value: Any) -> bool:
    """`value` as indented JSON (a line per field, as people read it), written by write_bytes_atomic."""
    return write_bytes_atomic(target, msgspec.json.format(msgspec.json.encode(value), indent=2) + b"\n")


def read_typed(path: Path, shape: Any, name: str | None = None) -> Any:
    """A JSON file decoded into `shape`; a file not of that shape is an error naming it (or `name`) and
    the place in it."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=shape)
    except msgspec.MsgspecError as error:
        raise PipelineError(f"{name or path}: {error}") from None


def read_toml(path: Path, shape: Any) -> Any:
    """A TOML file decoded into `shape`; a file missing or not of that shape is an error naming it and the
    place in it (e.g. `at $.tiers[0].name`)."""
    try:
        return msgspec.toml.decode(path.read_bytes(), type=shape)
    except (OSError, msgspec.MsgspecError) as error:
        raise PipelineError(f"{path}: {error}") from None


def replace_directory(staged: Path, target: Path) -> None:
    """Move a fully written `staged` directory into place at `target`, removing what was there."""
    retired = target.with_name(f".{target.name}.retired-{os.getpid()}")
    if target.exists():
        os.replace(target, retired)
    os.replace(staged, target)
    shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """Yield an empty folder beside `target` that replaces it, whatever was there, only if the block
    succeeds, and is removed either way. Its name is fixed, so the next run clears a stopped run's
    leftover: one writer per target at a time (OUT's lock, for the steps)."""
    staging = target.with_name(f".{target.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
        replace_directory(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def release_memory() -> None:
    """Hand freed memory back to the system after a large file: Arrow's pool and the C heap keep it
    otherwise, and a process's resident size would only ever grow over a snapshot's many files."""
    import ctypes

    import pyarrow

    pyarrow.default_memory_pool().release_unused()
    if (trim := getattr(ctypes.CDLL(None), "malloc_trim", None)) is not None:
        trim(0)
