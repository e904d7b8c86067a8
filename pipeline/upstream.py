"""Following the upstream: the commits of ml-energy/leaderboard that changed public/data, asked of
GitHub's REST API, and each one's files fetched from the raw-file host at that commit's hash (URLs
that never change). The facts recorded are those a shared snapshot's snapshot.json holds.

The newest commit is asked for with the ETag of the last answer (If-None-Match), so that an unchanged
upstream costs one small request that GitHub does not count against its rate limit."""

import os
import re
import urllib.parse
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

import msgspec

from pipeline.errors import PipelineError
from pipeline.fetch import (
    FetchResult, HttpReader, archive_damage, checked_time, commit_moment, fetch, held_snapshot, held_snapshot_ids,
)
from pipeline.files import read_typed, write_json_atomic
from pipeline.paths import Paths
from pipeline.settings import (
    COMMIT_PATTERN, GITHUB_API, GITHUB_RAW, GITHUB_TOKEN_VARIABLE, UPSTREAM_PATH, UPSTREAM_REPOSITORY,
)

REPOSITORY_URL = f"https://github.com/{UPSTREAM_REPOSITORY}"
OFFLINE_HINT = "offline? go on with a local copy, make SOURCE=<folder>, or a commit already fetched, make COMMIT=<sha>"
PAGE_SIZE = 100  # GitHub's largest page; the upstream's whole history of public/data fits in one today
Sha = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}$")]  # a full commit hash
NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
# The files of a snapshot folder, as a local fetch takes them (index.json, tasks/*.json, models/*.json),
# and the names among them safe to write.
DATA_FILE = re.compile(rf"^{UPSTREAM_PATH}/(index\.json|(?:tasks|models)/[^/]+\.json)$")
SAFE_NAME = re.compile(r"^(index\.json|(?:tasks|models)/[A-Za-z0-9._-]+\.json)$")


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
    return fetch(f"{github.raw}/{UPSTREAM_REPOSITORY}/{commit.sha}/{UPSTREAM_PATH}", paths, reader=github.reader,
                 commit_facts=github.facts(commit), listing=github.data_files(commit.sha))


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
