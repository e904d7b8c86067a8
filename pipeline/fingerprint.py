"""sha256 fingerprints: the one way the pipeline tells whether content is what it was."""

import hashlib
from collections.abc import Iterable
from pathlib import Path


def data_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def git_blob_sha1(path: Path) -> str:
    """The hash git gives a file's content: what GitHub's tree listing says each file is."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, lambda: hashlib.sha1(f"blob {path.stat().st_size}\0".encode())).hexdigest()


def files_sha256(paths: Iterable[Path], root: Path, extra: str = "") -> str:
    """One digest of several files' names (relative to `root`) and contents, in name order, and `extra`:
    it changes when any file is added, removed, renamed or edited."""
    digest = hashlib.sha256(extra.encode())
    for path in sorted(paths):
        digest.update(f"\0{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes())
    return digest.hexdigest()
