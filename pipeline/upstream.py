"""Fetching by URL, and following the upstream: a snapshot folder at an http(s) URL read through urllib3
(HttpReader: deadlines, size caps, redirects only on the same host), and the commits of
ml-energy/leaderboard that changed public/data, asked of GitHub's REST API, each one's files fetched
from the raw-file host at that commit's hash (URLs that never change). The facts recorded are those a
shared snapshot's snapshot.json holds; the files go into the raw archive (pipeline/archive.py).

The newest commit is asked for with the ETag of the last answer (If-None-Match), so that an unchanged
upstream costs one small request that GitHub does not count against its rate limit."""

import contextlib
import io
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import msgspec

from pipeline.archive import (
    FetchResult, FileEntry, archive_damage, checked_time, commit_moment, dictionary_pattern, held_snapshot,
    held_snapshot_ids, named_files, staging_folder, store, with_commit_time,
)
from pipeline.errors import PipelineError
from pipeline.files import read_typed, write_json_atomic
from pipeline.fingerprint import file_sha256, git_blob_sha1
from pipeline.paths import Paths
from pipeline.progress import each
from pipeline.settings import (
    COMMIT_PATTERN, DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES, DEFAULT_TIMEOUT_S, GITHUB_API, GITHUB_RAW,
    GITHUB_TOKEN_VARIABLE, UPSTREAM_PATH, UPSTREAM_REPOSITORY,
)

PINNED_COMMIT_PATTERN = re.compile(r"/([0-9a-f]{40})/")
MAX_REDIRECTS = 5
# A compressed body may expand at most this many times its received size: JSON compresses some 5 to 30
# times, a compression bomb some 1,000 times. It is refused as it expands, before its bytes reach the disk
# and a parse of them the memory (urllib3 decompresses each read into at most the bytes asked for).
MAX_EXPANSION = 200
# The longest a single wait (a socket's timeout, the deadline's timer) is asked to last: the platform's
# clocks hold no more. The command line allows a day at most (settings.LONGEST_LIMIT_S); a caller of
# these functions may ask for more.
LONGEST_WAIT_S = 1e9
LOCAL_HINT = "offline? a local copy works too: make SOURCE=<folder>"
# What a fetch by URL reads of index.json and the task files: the files they imply.
_Index = msgspec.defstruct("_Index", [("tasks", list[str])])
_TaskFile = msgspec.defstruct("_TaskFile", [("configurations", list[msgspec.defstruct("_Row", [("model_id", str)])])])
REPOSITORY_URL = f"https://github.com/{UPSTREAM_REPOSITORY}"
OFFLINE_HINT = "offline? go on with a local copy, make SOURCE=<folder>, or a commit already fetched, make COMMIT=<sha>"
PAGE_SIZE = 100  # GitHub's largest page; the upstream's whole history of public/data fits in one today
Sha = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}$")]  # a full commit hash
NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
# The files of a snapshot folder, as a local fetch takes them (index.json, tasks/*.json, models/*.json),
# and the names among them safe to write.
DATA_FILE = re.compile(rf"^{UPSTREAM_PATH}/(index\.json|(?:tasks|models)/[^/]+\.json)$")
SAFE_NAME = re.compile(r"^(index\.json|(?:tasks|models)/[A-Za-z0-9._-]+\.json)$")


class HttpReader:
    """The requests of one fetch over urllib3's pool (one connection reused for every file). Each has
    a deadline (`timeout_s`) within the fetch's (`fetch_deadline_s`): urllib3's timeouts bound each
    socket wait and, at the deadline, the response is shut down, so a server that trickles bytes holds
    the fetch (and OUT's lock) past neither. Redirects only to http(s) on the same host; bodies are
    streamed and capped at `max_file_bytes`."""

    def __init__(self, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float,
                 offline_hint: str = LOCAL_HINT) -> None:
        import urllib3

        self.timeout_s, self.max_file_bytes, self.fetch_deadline_s = timeout_s, max_file_bytes, fetch_deadline_s
        self.offline_hint = offline_hint  # where to go on when the network is not there
        self.restart_deadline()
        self.pool = urllib3.PoolManager(retries=False)  # a failure said at once; redirects checked here

    def restart_deadline(self) -> None:
        """Start a new fetch's deadline (one per snapshot when many are fetched in a row)."""
        self.fetch_deadline = time.monotonic() + self.fetch_deadline_s

    def _timed_out(self, url: str) -> PipelineError:
        if time.monotonic() >= self.fetch_deadline - 0.05:
            return PipelineError(f"{url}: the fetch did not finish within its {self.fetch_deadline_s:g} s deadline")
        return PipelineError(f"{url}: timed out: not received within {self.timeout_s:g} s")

    def get(self, url: str, headers: Mapping[str, str] | None = None,
            target: Path | None = None) -> tuple[int, Mapping[str, str], bytes]:
        """GET `url`: status, headers and body; with `target`, a 200 body is written to that file instead."""
        import urllib3

        deadline, asked = min(time.monotonic() + self.timeout_s, self.fetch_deadline), url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                if (left := deadline - time.monotonic()) <= 0:
                    raise self._timed_out(asked)
                left = min(left, LONGEST_WAIT_S)
                response = self.pool.request("GET", url, headers={"User-Agent": "energy-index", **(headers or {})},
                                             timeout=urllib3.Timeout(connect=left, read=left),
                                             preload_content=False, redirect=False)
                if response.status not in response.REDIRECT_STATUSES:
                    break
                response.close()
                moved = urllib.parse.urljoin(url, response.headers.get("Location", ""))
                new, old = urllib.parse.urlsplit(moved), urllib.parse.urlsplit(url)
                if new.scheme not in ("http", "https") or new.hostname != old.hostname:
                    raise PipelineError(f"{asked}: refused redirect to {moved} (only http(s) on the same host)")
                url = moved
            else:
                raise PipelineError(f"{asked}: more than {MAX_REDIRECTS} redirects")
            try:
                body = self._read(asked, response, deadline, target if response.status == 200 else None)
            except BaseException:
                response.close()  # a body left half read: the connection serves no other request
                raise
            response.release_conn()
            return response.status, response.headers, body
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(asked, error, deadline) from None

    def _failure(self, url: str, error: Exception, deadline: float) -> PipelineError:
        from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, TimeoutError as ReadTimeout

        if isinstance(error, NewConnectionError):  # refused, no route, unknown host (a ConnectTimeoutError too)
            reason = str(error).rpartition(": ")[2]
        elif isinstance(error, ConnectTimeoutError):
            reason = f"no connection within {self.timeout_s:g} s"
        elif isinstance(error, (ReadTimeout, TimeoutError)) or time.monotonic() >= deadline:
            return self._timed_out(url)
        else:
            reason = getattr(error, "reason", None) or str(error)
        return PipelineError(f"{url}: {reason} ({self.offline_hint})")

    def _read(self, url: str, response: Any, deadline: float, target: Path | None) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_file_bytes:
            raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes (Content-Length "
                                f"{declared}); raise --max-file-bytes if that is expected")
        cut = threading.Event()

        def cut_off() -> None:  # a read waiting on the socket returns at once
            cut.set()
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                response.shutdown()

        timer = threading.Timer(min(max(0.0, deadline - time.monotonic()), LONGEST_WAIT_S), cut_off)
        timer.start()
        size = 0
        try:
            if target is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") if target is not None else io.BytesIO() as handle:
                compressed = response.headers.get("Content-Encoding", "identity").strip().lower() != "identity"
                while chunk := response.read1(1 << 16):  # one socket read at most
                    if (size := size + handle.write(chunk)) > self.max_file_bytes:
                        raise PipelineError(f"{url}: larger than the size cap of {self.max_file_bytes} bytes")
                    if compressed and size > MAX_EXPANSION * max(response.tell(), 1 << 16):
                        raise PipelineError(f"{url}: its compressed body expands more than {MAX_EXPANSION} times "
                                            f"({response.tell():,} bytes received gave {size:,}); refused as a "
                                            "compression bomb")
                body = b"" if target is not None else handle.getvalue()
        except Exception:
            if not cut.is_set():
                raise
        finally:
            timer.cancel()
            timer.join()
        if cut.is_set():  # the read failed or ended early because the deadline cut it off
            raise self._timed_out(url)
        return body


def _fetch_url(source: str, staging: Path, reader: HttpReader, commit_time: str | None,
               commit_facts: dict[str, str] | None,
               listing: Mapping[str, tuple[int, str]] | None) -> tuple[dict[str, str], list[FileEntry]]:
    """The upstream facts (`commit_facts`, for the commit the URL is pinned to) and the files downloaded:
    those `listing` names (name -> size and git hash, as a commit's tree lists every file of the folder),
    each checked; without one, index.json, its tasks' files and the model files those imply."""
    from http.client import responses  # imported with urllib3, not by every fetch

    from schemas.rules import MODEL_ID_PATTERN

    if urllib.parse.urlsplit(source).scheme not in ("http", "https"):
        raise PipelineError(f"{source}: only http:// and https:// URLs can be fetched")
    pinned = PINNED_COMMIT_PATTERN.search(urllib.parse.urlsplit(source).path + "/")
    upstream = {"commit": pinned.group(1)} if pinned else {}
    if commit_facts is not None:
        if upstream.get("commit", commit_facts["commit"]) != commit_facts["commit"]:
            raise PipelineError(f"{source}: not the URL of commit {commit_facts['commit']}")
        upstream = dict(commit_facts)
    upstream = with_commit_time(upstream, commit_time, source)

    def download(name: str) -> FileEntry:
        url = f"{source.rstrip('/')}/{urllib.parse.quote(name)}"
        if (status := reader.get(url, target=staging / name)[0]) != 200:
            raise PipelineError(f"{url}: HTTP {status} {responses.get(status, '')}")
        return {"path": name, "sha256": file_sha256(staging / name), "size": (staging / name).stat().st_size}

    if listing is not None:
        files = [download(name) for name in each(sorted(listing), "fetch", "file")]
        for entry in files:
            size, blob = listing[entry["path"]]
            if entry["size"] != size or git_blob_sha1(staging / entry["path"]) != blob:
                raise PipelineError(f"{source}/{entry['path']}: not the file the commit's tree lists ({size} bytes, "
                                    f"git hash {blob[:12]}); received {entry['size']} bytes that differ; run again")
        # The tree is the snapshot as committed: a file its own index.json names and the tree lacks makes it
        # incomplete, refused before anything is kept (a missing model file would drop its rows silently).
        if missing := [name for name in named_files(staging) if name not in listing]:
            more = f" and {len(missing) - 1} more" if missing[1:] else ""
            raise PipelineError(f"{source}: the commit's tree lacks {missing[0]}{more}, which its own index.json "
                                "names; an incomplete snapshot is refused (nothing was kept)")
        return upstream, files
    files = [download("index.json")]
    tasks = read_typed(staging / "index.json", _Index, "index.json").tasks
    if not all(dictionary_pattern("tasks", "task").match(task) for task in tasks):
        raise PipelineError("index.json: field 'tasks' must be a list of task names (lower-case, digits, '-')")
    for task in each(tasks, "fetch", "task"):
        files.append(download(name := f"tasks/{task}.json"))
        for model_id in sorted({row.model_id for row in read_typed(staging / name, _TaskFile, name).configurations}):
            if not re.fullmatch(MODEL_ID_PATTERN, model_id):
                raise PipelineError(f"{name}: model_id {model_id!r} would not give a safe file name")
            files.append(download(f"models/{model_id.replace('/', '__')}__{task}.json"))
    return upstream, sorted(files, key=lambda entry: entry["path"])


def fetch_url(source: str, paths: Paths, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, fetch_deadline_s: float = DEFAULT_FETCH_DEADLINE_S,
              commit_time: str | None = None, reader: HttpReader | None = None,
              commit_facts: dict[str, str] | None = None, listing: Mapping[str, tuple[int, str]] | None = None,
              full_check: bool = False) -> FetchResult:
    """Bring the snapshot folder at URL `source` into OUT/raw/<snapshot-id>/. `reader` carries deadlines
    already running (the upstream's API was asked first), `commit_facts` are the upstream facts of the
    commit the URL is pinned to and `listing` its files as the commit's tree lists them."""

    with staging_folder(paths) as staging:
        upstream, files = _fetch_url(source, staging, reader or HttpReader(timeout_s, max_file_bytes, fetch_deadline_s),
                                     commit_time, commit_facts, listing)
        return store(paths, staging, upstream, files, source=source, origin=source, full_check=full_check)


class Commit(msgspec.Struct, frozen=True):
    sha: str
    time: str
    subject: str


# The parts of GitHub's answers read here: a commit of a listing, a commit's tree, an error's message.
_ListedCommit = msgspec.defstruct("_ListedCommit", [("sha", Sha), ("commit", msgspec.defstruct(
    "_CommitDetails", [("message", str), ("committer", msgspec.defstruct("_Committer", [("date", str)]))]))])
_TreeEntry = msgspec.defstruct("_TreeEntry", [("path", str), ("type", str), ("sha", str | None, None),
                                              ("size", int | None, None)])
_Tree = msgspec.defstruct("_Tree", [("tree", list[_TreeEntry]), ("truncated", bool, False)])
_ApiError = msgspec.defstruct("_ApiError", [("message", str, "")])
# OUT/raw/.upstream.json: the newest commit's listing as last answered, for a conditional request.
_ListingState = msgspec.defstruct("_ListingState", [("url", str), ("etag", str), ("newest", Commit)])


class GitHub:
    """The two upstream endpoints, read through one HttpReader (its deadlines, caps and redirect rule)."""

    def __init__(self, reader: HttpReader) -> None:
        self.reader, self.api, self.raw = reader, GITHUB_API.value(), GITHUB_RAW.value()
        self.token = os.environ.get(GITHUB_TOKEN_VARIABLE) or None

    def listing_url(self, path: str = UPSTREAM_PATH, **query: str | int) -> str:
        return f"{self.api}/repos/{UPSTREAM_REPOSITORY}/commits?{urllib.parse.urlencode({'path': path, **query})}"

    def _api(self, url: str, shape: Any, etag: str | None = None) -> tuple[Any, Mapping[str, str]]:
        """The answer at `url` decoded into `shape` (None for 304 Not Modified), and its headers."""
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if etag:
            headers["If-None-Match"] = etag
        status, answer_headers, body = self.reader.get(url, headers)
        if status == 304:
            return None, answer_headers
        if status in (403, 429) and (answer_headers.get("X-RateLimit-Remaining") == "0"
                                     or "Retry-After" in answer_headers):
            raise PipelineError(self._rate_limited(url, answer_headers))
        try:
            if status != 200:
                message = msgspec.json.decode(body, type=_ApiError).message
                raise PipelineError(f"{url}: HTTP {status}{': ' + message if message else ''}")
            return msgspec.json.decode(body, type=shape), answer_headers
        except msgspec.MsgspecError as error:
            raise PipelineError(f"{url}: HTTP {status}" if status != 200 else f"{url}: {error}") from None

    def _rate_limited(self, url: str, headers: Mapping[str, str]) -> str:
        now = datetime.now(timezone.utc)
        reset, retry_after = headers.get("X-RateLimit-Reset", ""), headers.get("Retry-After", "")
        at = (datetime.fromtimestamp(int(reset), timezone.utc) if reset.isdigit()
              else now + timedelta(seconds=int(retry_after)) if retry_after.isdigit() else None)
        when = (f"it resets at {at:%Y-%m-%d %H:%M:%S} UTC (in {max(0, round((at - now).total_seconds() / 60))} min)"
                if at else "it resets within the hour")
        limit = headers.get("X-RateLimit-Limit", "")
        allowance = f"{limit} requests an hour" if limit else "its hourly allowance"
        token = "with GITHUB_TOKEN" if self.token else "without GITHUB_TOKEN; set one for 5,000"
        return (f"{url}: GitHub's rate limit is used up ({allowance} {token}); {when}. Until then: "
                "make SOURCE=<folder>, or make COMMIT=<sha> of a commit already fetched")

    def _page(self, url: str, etag: str | None = None) -> tuple[list[Commit] | None, Mapping[str, str]]:
        """A page of the commit listing (None when not modified since `etag`)."""
        listed, headers = self._api(url, list[_ListedCommit], etag)
        commits = [Commit(entry.sha, entry.commit.committer.date, entry.commit.message.split("\n")[0].strip())
                   for entry in listed or []]
        for commit in commits:
            checked_time(commit.time, f"{url}: commit {commit.sha}:")
        return (None if listed is None else commits), headers

    def newest(self, paths: Paths) -> Commit:
        """The newest commit that touched public/data, asked with the ETag of the last answer."""
        url = self.listing_url(per_page=1)
        try:
            known = read_typed(paths.upstream_state, _ListingState)
            known = known if known.url == url else None
        except (OSError, PipelineError):
            known = None
        commits, headers = self._page(url, known.etag if known else None)
        if commits is None:
            if known is None:
                raise PipelineError(f"{url}: answered 304 Not Modified to a request that was not conditional")
            return known.newest
        if not commits:
            raise PipelineError(f"{url}: no commit has touched {UPSTREAM_PATH}")
        if headers.get("ETag"):
            write_json_atomic(paths.upstream_state, _ListingState(url, headers["ETag"], commits[0]))
        return commits[0]

    def at(self, ref: str) -> Commit:
        """The newest commit at or before `ref` that touched public/data: `ref` itself when it did."""
        commits, _ = self._page(self.listing_url(sha=ref, per_page=1))
        if not commits:
            raise PipelineError(f"commit {ref}: no commit at or before it touched {UPSTREAM_PATH} of {REPOSITORY_URL}")
        return commits[0]

    def history(self, since: str | None = None) -> list[Commit]:
        """Every commit that touched public/data (from `since`, a date, on), oldest first: the first page
        pins the newest commit, and the pages after it list from that commit. A listing of the branch
        moves when a commit is pushed or dropped between two pages (the next page then repeats or skips
        one); the listing from a commit never does."""
        query: dict[str, str | int] = {"per_page": PAGE_SIZE, **({"since": f"{since}T00:00:00Z"} if since else {})}
        url: str | None = self.listing_url(**query)
        commits: dict[str, Commit] = {}
        api, pin = urllib.parse.urlsplit(self.api), None
        while url:
            page, headers = self._page(url)
            pin = pin or (page[0].sha if page else None)
            commits.update((commit.sha, commit) for commit in page or [])
            url = match.group(1) if (match := NEXT_LINK.search(headers.get("Link", ""))) else None
            if url and urllib.parse.urlsplit(url)[:2] != api[:2]:
                raise PipelineError(f"{self.api}: refused a next page on another host or scheme: {url}")
            if url and pin:
                parts = urllib.parse.urlsplit(url)
                pinned = {**urllib.parse.parse_qs(parts.query), "sha": [pin]}
                url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(pinned, doseq=True)))
        return sorted(commits.values(), key=lambda commit: commit_moment(commit.time))

    def facts(self, commit: Commit) -> dict[str, str]:
        """What a shared snapshot's snapshot.json records, for `commit` (times in UTC, as the API gives
        them): the repository, the commit, its time and subject, and the date of the last commit at or
        before it that touched the task files."""
        tasks_commits, _ = self._page(self.listing_url(f"{UPSTREAM_PATH}/tasks", sha=commit.sha, per_page=1))
        facts = {"repository": REPOSITORY_URL, "commit": commit.sha, "commit_time": commit.time,
                 "commit_subject": commit.subject}
        if tasks_commits:
            facts["tasks_last_commit_date"] = commit_moment(tasks_commits[0].time).date().isoformat()
        return facts

    def data_files(self, sha: str) -> dict[str, tuple[int, str]]:
        """The snapshot's files at commit `sha` as its tree lists them: name -> (size, git hash). Unlike
        the files index.json implies, this has every file the folder holds, as a local copy does."""
        url = f"{self.api}/repos/{UPSTREAM_REPOSITORY}/git/trees/{sha}?recursive=1"
        tree, _ = self._api(url, _Tree)
        if tree.truncated:
            raise PipelineError(f"{url}: expected the commit's whole tree (an untruncated 'tree' list)")
        files = {}
        for entry in tree.tree:
            if entry.type != "blob" or not (data_file := DATA_FILE.match(entry.path)):
                continue
            if not SAFE_NAME.match(name := data_file.group(1)):
                raise PipelineError(f"{url}: {entry.path} would not give a safe file name; refused")
            if entry.size is None or entry.sha is None:
                raise PipelineError(f"{url}: {entry.path} has no size or sha")
            files[name] = (entry.size, entry.sha)
        if "index.json" not in files:
            raise PipelineError(f"{url}: commit {sha} has no {UPSTREAM_PATH}/index.json")
        return files


def open_github(timeout_s: float, max_file_bytes: int, fetch_deadline_s: float) -> GitHub:
    return GitHub(HttpReader(timeout_s, max_file_bytes, fetch_deadline_s, offline_hint=OFFLINE_HINT))


def fetch_commit(github: GitHub, paths: Paths, commit: Commit, held: dict[str, str] | None = None,
                 full_check: bool = False) -> FetchResult:
    """Fetch `commit`'s files unless OUT/raw holds them already, whole (a commit's files never change;
    archive_damage checks the copy by stat, or `full_check` by sha256 too). `held`: held_snapshot_ids(paths),
    when the caller has it."""
    held = held_snapshot_ids(paths) if held is None else held
    if commit.sha in held and archive_damage(paths, held[commit.sha], full=full_check) is None:
        return held_snapshot(paths, held[commit.sha])
    return fetch_url(f"{github.raw}/{UPSTREAM_REPOSITORY}/{commit.sha}/{UPSTREAM_PATH}", paths, reader=github.reader,
                     commit_facts=github.facts(commit), listing=github.data_files(commit.sha), full_check=full_check)


def fetch_upstream(
    paths: Paths, commit_ref: str | None, *, timeout_s: float, max_file_bytes: int, fetch_deadline_s: float,
    full_check: bool = False,
) -> tuple[FetchResult, Commit | None]:
    """The newest commit that touched public/data, or the one `commit_ref` names: fetched, or found
    in OUT/raw whole (fetch_commit). A pinned commit already held needs no request at all (it works offline)."""
    if commit_ref is not None:
        if not COMMIT_PATTERN.match(commit_ref):
            raise PipelineError(f"--commit {commit_ref!r} is not a commit hash (7 to 40 hex digits, e.g. 7885788)")
        held = {sha: s for sha, s in held_snapshot_ids(paths).items() if sha.startswith(commit_ref)}
        if len(held) == 1 and archive_damage(paths, *held.values(), full=full_check) is None:
            return held_snapshot(paths, *held.values()), None
    github = open_github(timeout_s, max_file_bytes, fetch_deadline_s)
    commit = github.at(commit_ref) if commit_ref is not None else github.newest(paths)
    return fetch_commit(github, paths, commit, full_check=full_check), commit
