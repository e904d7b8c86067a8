"""Atomic writes and strict JSON reading: the two ways the pipeline touches files."""

import functools
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError


@functools.cache
def _file_mode() -> int:
    """The mode a plain new file gets under this process's umask (os.umask can only be read by setting it)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it over `target` only if the block succeeds.

    The file gets the mode `open` would give it under the umask (mkstemp's is 0600), so a reader
    running as another user sees published files as it would see files made by cp.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, _file_mode())
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(target: Path, data: bytes) -> bool:
    """Write `data` to `target` atomically, leaving the file untouched if it already holds `data`.

    Returns True when the file was written.
    """
    try:
        if target.stat().st_size == len(data) and target.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return True


def replace_directory(staged: Path, target: Path) -> None:
    """Move a fully written `staged` directory into place at `target`, removing what was there."""
    if target.exists():
        retired = target.with_name(f".{target.name}.retired-{os.getpid()}")
        os.replace(target, retired)
        os.replace(staged, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staged, target)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range for a 64-bit float")
    return value


def _no_conflicting_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build an object, refusing a key given twice with different values.

    A key repeated with the same value is harmless and real: the upstream's 2025-12-15 text-to-image
    file repeats weight_precision in every entry.
    """
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj and obj[key] != value:
            raise ValueError(f"key {key!r} appears twice in one object with different values")
        obj[key] = value
    return obj


def load_json_strict(path: Path, display_name: str | None = None) -> Any:
    """Parse a JSON file as RFC 8259 says: UTF-8 without BOM, no NaN/Infinity, no key given two values.

    Every failure is a PipelineError naming the file and the position.
    """
    return parse_json_strict(path.read_bytes(), display_name or str(path))


def parse_json_strict(raw: bytes, name: str) -> Any:
    """load_json_strict for bytes already read; `name` is the file the messages name."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raise PipelineError(f"{name}: starts with a UTF-8 byte order mark, which JSON does not allow")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PipelineError(f"{name}: invalid UTF-8 at byte {error.start}") from None
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_no_conflicting_keys,
        )
    except json.JSONDecodeError as error:
        raise PipelineError(
            f"{name}: malformed JSON at line {error.lineno} column {error.colno} (char {error.pos}): {error.msg}"
        ) from None
    except ValueError as error:
        raise PipelineError(f"{name}: invalid JSON: {error}") from None
    except RecursionError:
        raise PipelineError(f"{name}: JSON nested too deeply to parse") from None


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none."""
    import ctypes

    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def release_memory() -> None:
    """Hand freed memory back to the system after a large file: Arrow's pool and the C heap keep it
    otherwise, and a process's resident size would only ever grow over a snapshot's many files."""
    import pyarrow

    pyarrow.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
