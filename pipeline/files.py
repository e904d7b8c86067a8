"""Atomic writes and JSON reading: the ways the pipeline touches files."""

import contextlib
import errno
import functools
import os
import re
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


# renameat2(2)'s flag that swaps two existing names in one step (linux/fs.h), and the directory its paths
# are relative to when not absolute (AT_FDCWD).
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
# How a file system or kernel without the exchange answers it: then two renames do (replace_directory).
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}
# Beside a target: a staged copy being written, or the copy it replaced on its way out, each named after the
# process that made it (`.<target>.staging-<pid>`, `.<target>.retired-<pid>`); a bare `.staging` is an older
# version's.
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>staging|retired)(?:-(?P<pid>[0-9]+))?")


@functools.cache
def _renameat2() -> Any:
    """glibc's renameat2 (2.28 on), or None where the C library has none (then two renames do)."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step, so that a reader of either name finds one or the other, never
    nothing (14 µs, as one rename); False, with nothing changed, where the file system or kernel cannot
    (Linux before 3.15, some network file systems, other systems)."""
    import ctypes

    if (renameat2 := _renameat2()) is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    if (code := ctypes.get_errno()) in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(second))


def _alive(pid: int) -> bool:
    """Whether process `pid` may still be running (another user's included); a zombie counts as alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers(folder: Path) -> None:
    """Remove the staged and retired copies (_LEFTOVER) that stopped processes left in `folder`, never a
    live process's. A retired copy of a target that is missing (a process stopped between
    replace_directory's two renames, where the exchange is not available) is put back instead: the old
    folder again, rather than none."""
    if not folder.is_dir():
        return
    for leftover in sorted(folder.iterdir()):
        if (found := _LEFTOVER.fullmatch(leftover.name)) is None or (
                found["pid"] is not None and _alive(int(found["pid"]))):
            continue
        owner = leftover.with_name(found["name"])
        if found["kind"] == "retired" and not owner.exists() and not owner.is_symlink():
            with contextlib.suppress(OSError):
                os.rename(leftover, owner)
                continue
        shutil.rmtree(leftover, ignore_errors=True)


def replace_directory(staged: Path, target: Path) -> None:
    """Move a fully written `staged` directory into place at `target`, removing what was there. A reader
    of `target` finds the old folder or the new one at every moment: the two are swapped in one step and
    the old one, then at `staged`, removed. Where the file system cannot swap, the old one is renamed away
    first; a process stopped between the two renames leaves it beside `target`, where sweep_leftovers puts
    it back."""
    if target.exists() and exchange(staged, target):
        shutil.rmtree(staged, ignore_errors=True)
        return
    retired = target.with_name(f".{target.name}.retired-{os.getpid()}")
    if target.exists():
        os.replace(target, retired)
    os.replace(staged, target)
    shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """Yield an empty folder beside `target` that replaces it, whatever was there, only if the block
    succeeds, and is removed either way. What stopped runs left beside it goes first (sweep_leftovers)."""
    sweep_leftovers(target.parent)
    staging = target.with_name(f".{target.name}.staging-{os.getpid()}")
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
