"""Shared fixtures: the real upstream snapshots in ../shared, and helpers to run the CLI."""

import fcntl
import hashlib
import os
import re
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.archive import snapshot_id_of
from pipeline.settings import GITHUB_API, GITHUB_RAW
from pipeline.paths import Paths

# No test reaches GitHub: a refresh without a source that a test forgets to point elsewhere is refused
# at once (port 9, discard, is closed), in this process and in every make or CLI it starts.
os.environ[GITHUB_API.name] = os.environ[GITHUB_RAW.name] = "http://127.0.0.1:9"
os.environ.pop("GITHUB_TOKEN", None)

PROJECT = Path(__file__).resolve().parents[1]
SHARED = PROJECT.parent / "shared"
UPSTREAM = SHARED / "upstream" / "ml-energy-leaderboard"
SEED = SHARED / "seed" / "llama-4-scout-17b-16e-instruct.json"
NEWEST = UPSTREAM / "2026-02-16-7885788"
SNAPSHOTS = sorted(path for path in UPSTREAM.iterdir() if path.is_dir()) if UPSTREAM.is_dir() else []
# The dates the seed was built with (../shared/README.md).
SEED_AS_OF, SEED_RETRIEVED = "2026-09-27", "2026-09-26"


def snapshot_id(folder: Path) -> str:
    """The id a shared snapshot folder is ingested under: its commit's UTC date and short hash (the
    folder's name has the committer's local date)."""
    return snapshot_id_of(read_json(folder / "snapshot.json"), [])


@dataclass
class Run:
    exit_code: int
    stderr: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*args: str) -> Run:
        code = main([str(arg) for arg in args])
        return Run(code, capsys.readouterr().err)

    return run


def refresh_args(source: Path | str, out: Path, *extra: str) -> list[str]:
    return ["refresh", "--source", str(source), "--out", str(out), *extra]


def tree_digest(root: Path, *parts: str) -> dict[str, str]:
    """sha256 of every file below the named parts of `root`: what a reader of a build would see."""
    digest = {}
    for part in parts:
        base = root / part
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            digest[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


BUILD_OUTPUTS = ("parquet", "energy_index.duckdb", "index")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def upstream_rows(snapshot: Path, task: str) -> list[dict[str, Any]]:
    return read_json(snapshot / "tasks" / f"{task}.json")["configurations"]


def _shared_build(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str, arguments: list[str]) -> Paths:
    """A build made once per test session, shared by the xdist workers (the first to take the lock
    builds it; the others wait and read it). Tests only read it, or write beside it under OUT's lock."""
    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent  # the parent is this session's, shared by workers
    out = root / f"shared-{name}" / "out"
    with open(root / f"shared-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"shared-{name}" / "done"
        if not done.exists():
            shutil.rmtree(out.parent, ignore_errors=True)
            assert main([*arguments, "--out", str(out)]) == 0
            done.touch()
    return Paths(out)


@pytest.fixture(scope="session")
def newest_build(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Paths:
    """A refresh of the newest shared snapshot with the seed's dates."""
    arguments = ["refresh", "--source", str(NEWEST), "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED]
    return _shared_build(tmp_path_factory, worker_id, "newest", arguments)


@pytest.fixture
def source_copy(tmp_path: Path) -> Path:
    """A writable copy of the newest snapshot, for tests that damage it."""
    copy = tmp_path / "source"
    shutil.copytree(NEWEST, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    copy.chmod(0o755)
    return copy


@pytest.fixture(scope="session", params=SNAPSHOTS, ids=lambda path: path.name)
def snapshot_build(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Paths]:
    """A refresh of each shared snapshot, built once per test session."""
    out = tmp_path_factory.mktemp(request.param.name) / "out"
    assert main(refresh_args(request.param, out)) == 0
    return request.param, Paths(out)


@pytest.fixture(scope="session")
def history_build(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Paths:
    """All eleven shared snapshots in one database, the index on the newest, with the seed's dates."""
    arguments = ["history", "--source", str(UPSTREAM), "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED]
    return _shared_build(tmp_path_factory, worker_id, "history", arguments)


DOCUMENTATION = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]


def documentation_text() -> str:
    """README.md and every page under docs/, as one text: what the user reads."""
    return "\n".join(page.read_text(encoding="utf-8") for page in DOCUMENTATION)


def readme_queries() -> list[str]:
    """Every statement of every ```sql block of README.md and docs/."""
    text = documentation_text()
    blocks = re.findall(r"^```sql\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    statements = []
    for block in blocks:
        body = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("--"))
        statements += [statement.strip() for statement in body.split(";") if statement.strip()]
    return statements


@contextmanager
def busy_loops(load: str) -> Iterator[None]:
    """For load "loaded", the machine kept busy by two busy loops (one per core here) while in the block."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if load == "loaded" else 0)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def write_once(build: Paths, command: str, timeout: int = 400) -> str:
    """`energy-index COMMAND --out` over a shared session build, run by one xdist worker only: each worker
    has its own module fixtures, and two write commands at once in one OUT would meet its lock. The
    others wait for it. Returns what the run printed on stderr (empty for the workers that waited)."""
    with open(build.out.parent / f"{command}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = build.out.parent / f"{command}-done"
        if done.exists():
            return ""
        made = subprocess.run([str(Path(sys.executable).with_name("energy-index")), command, "--out", str(build.out)],
                              capture_output=True, text=True, timeout=timeout)
        assert made.returncode == 0, made.stderr
        done.touch()
        return made.stderr
