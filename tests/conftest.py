"""Shared fixtures: the real upstream snapshots in ../shared, and helpers to run the CLI."""

import fcntl
import functools
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from github_server import FakeGitHub, GitHubServer, shared_commits

from pipeline.cli import main
from pipeline.archive import snapshot_id_of
from pipeline.paths import PROJECT_ROOT, Paths
from pipeline.settings import CATALOG_CACHE, GITHUB_API, GITHUB_RAW

# No test reaches GitHub: a refresh without a source that a test forgets to point elsewhere is refused
# at once (port 9, discard, is closed), in this process and in every make or CLI it starts.
os.environ[GITHUB_API.name] = os.environ[GITHUB_RAW.name] = "http://127.0.0.1:9"
os.environ.pop("GITHUB_TOKEN", None)
# The catalogue a fresh build starts from is kept in the project's pytest cache, never in the user's:
# made by the first build of a run of the suite, shared by its workers and by the commands they start.
os.environ[CATALOG_CACHE.name] = str(PROJECT_ROOT / ".pytest_cache" / "catalogues")

# A suite started where Ctrl-C is ignored (a background job of a shell without job control, nohup) would
# pass that on to every command the tests start, and the Ctrl-C tests would see no Ctrl-C: the test
# processes take it as an interactive run does.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PROJECT = Path(__file__).resolve().parents[1]
# Resolved, as a fetch records a local source: ../shared may be a link (the pipeline names the folder it reads).
SHARED = (PROJECT.parent / "shared").resolve()
UPSTREAM = SHARED / "upstream" / "ml-energy-leaderboard"
SEED = SHARED / "seed" / "llama-4-scout-17b-16e-instruct.json"
NEWEST = UPSTREAM / "2026-02-16-7885788"
SNAPSHOTS = sorted(path for path in UPSTREAM.iterdir() if path.is_dir()) if UPSTREAM.is_dir() else []
# The snapshots make test builds one by one: the last with the old parallelism layout and no
# avg_output_len, and the newest. The other nine are in make test-all (marker sweep).
EVERYDAY_SNAPSHOTS = ("2025-12-01-f74deb8", "2026-02-16-7885788")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the eleven-snapshot history (history_build) is a many-snapshot test: make test-all
    runs it (marker sweep), and make test builds no history."""
    for item in items:
        if "history_build" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sweep)


def swept(values: list[Any], everyday: Callable[[Any], bool], ids: Callable[[Any], str] = str) -> list[Any]:
    """`values` as parameters, those `everyday` does not keep marked sweep (make test-all only)."""
    return [pytest.param(value, id=ids(value), marks=() if everyday(value) else pytest.mark.sweep) for value in values]


def every_snapshot() -> list[Any]:
    """Each shared snapshot folder as a parameter; make test keeps EVERYDAY_SNAPSHOTS."""
    return swept(SNAPSHOTS, lambda path: path.name in EVERYDAY_SNAPSHOTS, lambda path: path.name)
def examples(everyday: int, full: int) -> int:
    """How many examples a hypothesis property draws: `everyday` in `make test`, `full` with EXAMPLES=full
    (`make test-all`)."""
    return full if os.environ.get("EXAMPLES") == "full" else everyday


# The dates the seed was built with (../shared/README.md).
SEED_AS_OF, SEED_RETRIEVED = "2026-09-27", "2026-09-26"
CLI = str(Path(sys.executable).with_name("energy-index"))


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


def shared_folder(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str,
                  make: Callable[[Path], object]) -> Path:
    """A folder `make` fills once per test session, shared by the xdist workers (the first to take the
    lock makes it; the others wait and read it). Tests only read it, or write beside it under a lock."""
    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent  # the parent is this session's, shared by workers
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "done"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


def _shared_build(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str, arguments: list[str]) -> Paths:
    """`energy-index ARGUMENTS --out OUT`, made once per test session (shared_folder)."""
    def build(folder: Path) -> None:
        assert main([*arguments, "--out", str(folder / "out")]) == 0

    return Paths(shared_folder(tmp_path_factory, worker_id, name, build) / "out")


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


@pytest.fixture(scope="session")
def snapshot_refresh(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Callable[[Path], Paths]:
    """`energy-index refresh --source SNAPSHOT` with the defaults into an OUT of its own, for each shared
    snapshot asked for, made once per test session whichever worker asks first."""
    return lambda snapshot: _shared_build(tmp_path_factory, worker_id, snapshot.name,
                                          ["refresh", "--source", str(snapshot)])


@pytest.fixture(scope="session", params=every_snapshot())
def snapshot_build(request: pytest.FixtureRequest, snapshot_refresh: Callable[[Path], Paths]) -> tuple[Path, Paths]:
    """A refresh of each shared snapshot, built once per test session."""
    return request.param, snapshot_refresh(request.param)


@pytest.fixture(scope="session")
def plain_build(snapshot_refresh: Callable[[Path], Paths]) -> Paths:
    """A refresh of the newest shared snapshot with the defaults (`energy-index refresh --source NEWEST`):
    what a test that needs some published build starts from, as a copy (copy_build)."""
    return snapshot_refresh(NEWEST)


# Beside a shared build: held by write_once while it writes, and by copy_build (shared) while it copies.
WRITE_ONCE_LOCK = "write-once.lock"


@contextmanager
def not_while_written(build: Paths) -> Iterator[None]:
    """The block runs while no write_once writes over the shared build: a copy of it (a report or a release
    staged in it would vanish under the copy), or a command that takes its OUT's lock (it would be refused)."""
    with open(build.out.parent / WRITE_ONCE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def copy_build(build: Paths, out: Path) -> Path:
    """A writable copy of a shared build at `out` (its links to the published generation kept as links):
    the same files a refresh into `out` would have published, without running it again."""
    with not_while_written(build):
        shutil.copytree(build.out, out, symlinks=True)
    return out


@pytest.fixture(scope="session")
def undated_refresh(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, Path, str]:
    """`energy-index refresh --source UNDATED --out OUT` with the seed's dates, where UNDATED is a copy of the
    newest snapshot without its snapshot.json (no commit facts, so its id follows its content), made once
    per test session. Returns UNDATED, OUT and what the refresh printed on stderr; tests only read them
    (a test that edits the source works on writable_copy(UNDATED, ...), and on copy_build(Paths(OUT), ...))."""
    def refresh(folder: Path) -> None:
        undated = writable_copy(NEWEST, folder / "undated")
        (undated / "snapshot.json").unlink()
        alone = cli("refresh", "--source", undated, "--out", folder / "out", "--as-of", SEED_AS_OF,
                    "--retrieved", SEED_RETRIEVED)
        assert alone.returncode == 0, alone.stderr
        (folder / "stderr.txt").write_text(alone.stderr, encoding="utf-8")

    folder = shared_folder(tmp_path_factory, worker_id, "undated-newest", refresh)
    return folder / "undated", folder / "out", (folder / "stderr.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session", autouse=True)
def history_started_beside_the_first_build(request: pytest.FixtureRequest, worker_id: str) -> None:
    """The second xdist worker starts with the eleven-snapshot history when the selected tests read it,
    while the first makes the newest snapshot's build its first tests need: neither waits for the other
    to make both."""
    if worker_id == "gw1" and any("history_build" in item.fixturenames for item in request.session.items):
        request.getfixturevalue("history_build")


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


def write_once(build: Paths, command: str) -> str:
    """`energy-index COMMAND --out` over a shared session build, run by one xdist worker only: each worker
    has its own module fixtures. The others wait for it, as does any other write command over the same
    build (a report and a release at once would meet OUT's lock, which refuses the second). Returns what
    the run printed on stderr (empty for the workers that waited)."""
    with open(build.out.parent / WRITE_ONCE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = build.out.parent / f"{command}-done"
        if done.exists():
            return ""
        made = cli(command, "--out", build.out)
        assert made.returncode == 0, made.stderr
        done.touch()
        return made.stderr


def cli(*args: str | Path, columns: int = 100) -> subprocess.CompletedProcess[str]:
    """`energy-index ARGS` run in this process, COLUMNS wide: its exit status and what it printed, as a
    process of its own would give them (a usage error is click's SystemExit, status 2)."""
    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True) for _ in range(2))
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            try:
                code = main([str(arg) for arg in args])
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    finally:
        if saved is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = saved
    printed = [stream.buffer.getvalue().decode("utf-8") for stream in (stdout, stderr)]
    return subprocess.CompletedProcess(["energy-index", *map(str, args)], code, *printed)


def cli_process(*args: str | Path, columns: int = 100, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`energy-index ARGS` as a process of its own, COLUMNS wide: for tests whose subject is the process
    (its environment, its exit, its signals, its memory)."""
    environment = {**kwargs.pop("env", os.environ), "COLUMNS": str(columns)}
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600, env=environment,
                          **kwargs)


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(PROJECT), *args], capture_output=True, text=True, timeout=300)


def make_refresh(out: Path, source: Path | str, *extra: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-C", str(PROJECT), f"SOURCE={source}", f"OUT={out}", *extra],
        capture_output=True, text=True, timeout=300,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def published_snapshot(out: Path) -> str:
    with duckdb.connect(str(out / "energy_index.duckdb"), read_only=True) as connection:
        return connection.execute("select snapshot_id from index_snapshot").fetchone()[0]


def writable_copy(snapshot: Path, target: Path) -> Path:
    shutil.copytree(snapshot, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


# The newest shared snapshot's upstream commit, under which the fault server serves it.
SERVED_COMMIT = "7885788e837b80ad172e02e6e8c47e8d0b85520e"


class FaultyHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder, but for the paths given a fault: a redirect, a stall (no answer until the test
    ends), a trickle (a byte every 0.2 s, 12 s at most), an endless body (256 MiB at most, past every
    client cap the tests set) or a declared length of 10**12 with no body."""

    redirects: dict[str, str] = {}
    stalled: set[str] = set()
    trickling: set[str] = set()
    endless: set[str] = set()
    huge_length: set[str] = set()
    released = threading.Event()  # set when the test ends: a stalled answer is never sent before that

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        if self.path in self.stalled:
            self.released.wait()
            return
        if self.path in self.huge_length:
            self.send_response(200)
            self.send_header("Content-Length", str(10**12))
            self.end_headers()
            self.released.wait()  # the body never comes
            return
        if self.path in self.trickling:
            self.send_response(200)
            self.end_headers()
            for _ in range(60):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                if self.released.wait(0.2):
                    return
            return
        if self.path in self.endless:
            self.send_response(200)
            self.end_headers()
            for _ in range(4096):
                try:
                    self.wfile.write(b"[" * 65536)
                except OSError:
                    return
            return
        if self.path in self.redirects:
            self.send_response(302)
            self.send_header("Location", self.redirects[self.path])
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The one test server, on 127.0.0.1: serves tmp_path/www, where the shared newest snapshot is linked
    in at <SERVED_COMMIT>/public/data, with the faults a test gives FaultyHandler's paths."""
    www = tmp_path / "www"
    (www / SERVED_COMMIT / "public").mkdir(parents=True)
    os.symlink(NEWEST, www / SERVED_COMMIT / "public" / "data")
    FaultyHandler.redirects = {}
    FaultyHandler.stalled, FaultyHandler.trickling, FaultyHandler.endless, FaultyHandler.huge_length = (
        set(), set(), set(), set())
    FaultyHandler.released = threading.Event()
    handler = functools.partial(FaultyHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # Polled every 0.05 s, not 0.5 s: shutdown() at the test's end waits for the next poll.
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    finally:
        FaultyHandler.released.set()
        httpd.shutdown()
        httpd.server_close()


# The shared snapshots as the GitHub stand-in serves them, by short hash.
COMMITS = {commit.sha[:7]: commit for commit in shared_commits(SNAPSHOTS)}


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """The GitHub stand-in (tests/github_server.py) on 127.0.0.1, and this process's fetches pointed at it."""
    state = FakeGitHub()
    with GitHubServer(state):
        monkeypatch.setenv(GITHUB_API.name, state.api)
        monkeypatch.setenv(GITHUB_RAW.name, state.raw)
        yield state
