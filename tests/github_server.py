"""A stand-in for the two GitHub endpoints the upstream is read from, listening on 127.0.0.1 only:
the REST API's commit listing (filtered by path, from a commit, since a time; pages with Link headers;
ETags and 304s; a rate-limit answer) and the raw-file host, serving the shared snapshots as the
commits of ml-energy/leaderboard."""

import hashlib
import http.server
import json
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPOSITORY = "ml-energy/leaderboard"
LISTING = f"/api/repos/{REPOSITORY}/commits"
RAW_PREFIX = f"/raw/{REPOSITORY}/"
TREES = f"/api/repos/{REPOSITORY}/git/trees/"


@dataclass(frozen=True)
class ServedCommit:
    sha: str
    time: str  # UTC, as GitHub's API writes it
    subject: str
    folder: Path
    touches_tasks: bool


def shared_commits(folders: list[Path]) -> list[ServedCommit]:
    """The shared snapshot folders as commits, oldest first; a commit touches tasks/ when its task
    files differ from the commit before's."""
    facts = [(json.loads((folder / "snapshot.json").read_text()), folder) for folder in folders]
    facts.sort(key=lambda pair: datetime.fromisoformat(pair[0]["commit_time"]))
    commits, previous = [], None
    for snapshot, folder in facts:
        tasks = {path.name: path.read_bytes() for path in sorted((folder / "tasks").iterdir())}
        moment = datetime.fromisoformat(snapshot["commit_time"]).astimezone(timezone.utc)
        commits.append(ServedCommit(snapshot["commit"], moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                    snapshot["commit_subject"], folder, tasks != previous))
        previous = tasks
    return commits


@dataclass
class FakeGitHub:
    """What the server serves and what it was asked. Tests change it between runs."""

    commits: list[ServedCommit] = field(default_factory=list)  # oldest first
    max_page_size: int = 100
    rate_limit_reset: int | None = None  # while set, every API request is refused as over the limit
    held_back: dict[str, threading.Event] = field(default_factory=dict)  # raw path -> released when set
    requests: list[dict[str, str | None]] = field(default_factory=list)
    base: str = ""
    # Commits dropped from the branch (a force-push): not in its listing, still listed from a commit after them.
    dropped: set[str] = field(default_factory=set)
    # Called with each listing query once its page is answered: a test changes the listing between pages.
    after_listing: Callable[[dict[str, str]], None] | None = None

    @property
    def api(self) -> str:
        return f"{self.base}/api"

    @property
    def raw(self) -> str:
        return f"{self.base}/raw"

    def api_requests(self) -> list[dict[str, str | None]]:
        return [r for r in self.requests if r["kind"] == "api"]

    def raw_requests(self) -> list[dict[str, str | None]]:
        return [r for r in self.requests if r["kind"] == "raw"]

    def listing(self, query: dict[str, str]) -> list[ServedCommit]:
        commits = list(reversed(self.commits))  # newest first, as GitHub lists them
        if "sha" not in query:
            commits = [commit for commit in commits if commit.sha not in self.dropped]
        if "sha" in query:
            starts = [i for i, commit in enumerate(commits) if commit.sha.startswith(query["sha"])]
            commits = commits[starts[0]:] if starts else []
        path = query.get("path", "")
        if path == "public/data/tasks":
            commits = [commit for commit in commits if commit.touches_tasks]
        elif path != "public/data":
            commits = []
        if "since" in query:
            commits = [commit for commit in commits if commit.time >= query["since"]]
        return commits


def _commit_json(commit: ServedCommit) -> dict[str, object]:
    person = {"name": "someone", "email": "someone@example.org", "date": commit.time}
    return {"sha": commit.sha, "commit": {"author": person, "committer": person,
                                          "message": f"{commit.subject}\n\nmore words"}}


class _Handler(http.server.BaseHTTPRequestHandler):
    state: FakeGitHub

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        url = urllib.parse.urlsplit(self.path)
        kind = "api" if url.path.startswith("/api/") else "raw"
        self.state.requests.append({
            "kind": kind, "path": self.path, "if_none_match": self.headers.get("If-None-Match"),
            "authorization": self.headers.get("Authorization"),
        })
        if url.path == LISTING:
            self._listing(dict(urllib.parse.parse_qsl(url.query)))
        elif url.path.startswith(TREES):
            self._tree(url.path.removeprefix(TREES))
        elif url.path.startswith(RAW_PREFIX):
            self._raw(url.path.removeprefix(RAW_PREFIX))
        else:
            self._send(404, b'{"message": "Not Found"}')

    def _listing(self, query: dict[str, str]) -> None:
        if self.state.rate_limit_reset is not None:
            self._send(403, b'{"message": "API rate limit exceeded for 127.0.0.1."}', {
                "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": str(self.state.rate_limit_reset)})
            return
        commits = self.state.listing(query)
        size = min(int(query.get("per_page", "30")), self.state.max_page_size)
        page = int(query.get("page", "1"))
        body = json.dumps([_commit_json(c) for c in commits[(page - 1) * size:page * size]]).encode()
        headers = {"ETag": f'W/"{hashlib.sha256(body).hexdigest()}"'}
        if page * size < len(commits):
            next_query = urllib.parse.urlencode({**query, "page": page + 1})
            headers["Link"] = f'<{self.state.api}/repos/{REPOSITORY}/commits?{next_query}>; rel="next"'
        if self.headers.get("If-None-Match") == headers["ETag"]:
            self._send(304, b"", headers)
        else:
            self._send(200, body, headers)
        if self.state.after_listing is not None:
            self.state.after_listing(query)

    def _tree(self, sha: str) -> None:
        """The commit's whole tree, as git/trees/<sha>?recursive=1 lists it (with a file outside the data)."""
        commit = next((c for c in self.state.commits if c.sha == sha), None)
        if commit is None:
            self._send(404, b'{"message": "Not Found"}')
            return
        entries = [{"path": "README.md", "type": "blob", "size": 6, "sha": "0" * 40},
                   {"path": "public/data", "type": "tree", "sha": "1" * 40}]
        for path in sorted(commit.folder.rglob("*")):
            if path.is_file() and path.name != "snapshot.json":
                content = path.read_bytes()
                blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()
                relative = path.relative_to(commit.folder).as_posix()
                entries.append({"path": f"public/data/{relative}", "type": "blob", "size": len(content), "sha": blob})
        self._send(200, json.dumps({"sha": sha, "tree": entries, "truncated": False}).encode())

    def _raw(self, rest: str) -> None:
        sha, _, relative = rest.partition("/public/data/")
        commit = next((c for c in self.state.commits if c.sha == sha), None)
        path = commit.folder / relative if commit and relative and ".." not in relative else None
        if path is None or not path.is_file():
            self._send(404, b"404: Not Found")
            return
        gate = self.state.held_back.get(f"{sha}/{relative}")
        if gate is not None:
            gate.wait(timeout=60)
        self._send(200, path.read_bytes())

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client went away (a test stopped it)

    def log_message(self, *args: object) -> None:
        pass


class GitHubServer:
    def __init__(self, state: FakeGitHub) -> None:
        handler = type("Handler", (_Handler,), {"state": state})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        state.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "GitHubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
