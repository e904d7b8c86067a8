"""Atomic writes and JSON reading: the ways the pipeline touches files."""

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

import msgspec

from pipeline.errors import PipelineError


@functools.cache
def _file_mode() -> int:
    """The mode `open` gives a new file under this process's umask (which only setting it reveals)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`, renamed over it only if the block succeeds. It gets the
    mode a file made by cp would (mkstemp's is 0600), so readers running as another user can read it."""
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
    """Write `data` to `target` atomically; a file already holding `data` is left untouched. True when
    written."""
    try:
        if target.stat().st_size == len(data) and target.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
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


def replace_directory(staged: Path, target: Path) -> None:
    """Move a fully written `staged` directory into place at `target`, removing what was there."""
    if target.exists():
        retired = target.with_name(f".{target.name}.retired-{os.getpid()}")
        os.replace(target, retired)
        os.replace(staged, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staged, target)


def _finite_float(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise ValueError(f"number {text} is out of range for a 64-bit float")
    return value


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _no_conflicting_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refusing a key given twice with different values (the same value twice is harmless
    and real: the upstream's 2025-12-15 text-to-image file repeats weight_precision in every entry)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj and obj[key] != value:
            raise ValueError(f"key {key!r} appears twice in one object with different values")
        obj[key] = value
    return obj


def load_json_strict(path: Path, display_name: str | None = None) -> Any:
    return parse_json_strict(path.read_bytes(), display_name or str(path))


def parse_json_strict(raw: bytes, name: str) -> Any:
    """JSON as RFC 8259 says: UTF-8 without BOM, no NaN/Infinity, no key given two values; a failure
    names `name` and the position. The standard library's parser, because msgspec (fast, and used
    wherever a file is well formed) keeps a repeated key's last value and gives no line and column."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raise PipelineError(f"{name}: starts with a UTF-8 byte order mark, which JSON does not allow")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PipelineError(f"{name}: invalid UTF-8 at byte {error.start}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=_no_conflicting_keys)
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
    import ctypes

    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def release_memory() -> None:
    """Hand freed memory back to the system after a large file: Arrow's pool and the C heap keep it
    otherwise, and a process's resident size would only ever grow over a snapshot's many files."""
    import pyarrow

    pyarrow.default_memory_pool().release_unused()
    if (trim := _malloc_trim()) is not None:
        trim(0)
