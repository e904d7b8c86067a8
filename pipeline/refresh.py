"""The refresh and the history: fetch -> ingest -> build -> export in order, each step's lines on stderr,
published all at once (pipeline/publish.py) or not at all. Here is why a refresh does nothing (the
published build already is this one, its files intact), rebuilds (anything else changed or a published
file is damaged) and what it repairs. The command line (pipeline/cli_steps.py) parses options into `Options`
and calls these functions; they hold OUT's lock already."""

import time
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import settings
from pipeline.archive import FetchResult
from pipeline.errors import PipelineError
from pipeline.paths import Paths
from pipeline.progress import say, seconds_since

if TYPE_CHECKING:  # DuckDB's, which a refresh with nothing to do never loads
    from pipeline.outcome import Outcome


@dataclass(frozen=True)
class Options:
    """The parameters of the steps, named as the command line's options (defaults: pipeline/settings.py)."""

    source: str | None = None
    commit: str | None = None
    commit_time: str | None = None
    timeout: float = settings.TIMEOUT.default
    max_file_bytes: int = settings.MAX_FILE_BYTES.default
    fetch_deadline: float = settings.FETCH_DEADLINE.default
    itl_deadline_ms: float = settings.ITL_DEADLINE_MS.default
    latency_tiers: Path = settings.LATENCY_TIERS.default
    index_snapshot: str | None = None  # None: the newest snapshot in the database
    as_of: str | None = None
    retrieved: str | None = None

    @classmethod
    def of(cls, values: Any, **overrides: Any) -> "Options":
        """The options `values` (an object with the options as attributes) has, the others at their defaults."""
        known = {field.name: getattr(values, field.name) for field in fields(cls) if hasattr(values, field.name)}
        return cls(**{**known, **overrides})


def _warn(label: str, notices: Iterable[str]) -> None:
    for notice in notices:
        say(f"{label}: warning: {notice}")


def run_fetch(options: Options, paths: Paths, source: str | None = None, full_check: bool = False) -> FetchResult:
    """Fetch `source`, options.source, or else the upstream's newest commit that changed its data (or
    options.commit). A copy already in OUT/raw is checked by stat (or `full_check`: by sha256) and fetched
    again when damaged."""
    source, commit_time = source or options.source, options.commit_time
    started = time.perf_counter()
    if source is not None:
        from pipeline.fetch import fetch

        say(f"fetch: reading {source}")
        result = fetch(source, paths, timeout_s=options.timeout, max_file_bytes=options.max_file_bytes,
                       fetch_deadline_s=options.fetch_deadline, commit_time=commit_time, full_check=full_check)
    elif commit_time is not None:
        raise PipelineError("--commit-time is for a --source without snapshot.json; the upstream's commits "
                            "carry their own time")
    else:
        from pipeline.upstream import fetch_upstream

        path, repository = settings.UPSTREAM_PATH, settings.UPSTREAM_REPOSITORY
        wanted = f"commit {options.commit}" if options.commit else f"the newest commit that changed {path}"
        say(f"fetch: asking {settings.GITHUB_API.value()} for {wanted} of {repository}")
        result, commit = fetch_upstream(paths, options.commit, timeout_s=options.timeout,
                                        max_file_bytes=options.max_file_bytes, fetch_deadline_s=options.fetch_deadline,
                                        full_check=full_check)
        if commit is not None and options.commit and not commit.sha.startswith(options.commit):
            say(f"fetch: commit {options.commit} did not change {path}; its data is that of {commit.sha[:7]} "
                f"({commit.subject})")
        if commit is not None:
            say(f"fetch: {repository} {commit.sha[:7]}, {commit.time}: {commit.subject}")
    _warn("fetch", result.notices)
    say(f"fetch: {result.file_count} files, {result.total_bytes / 1e6:.1f} MB -> {result.directory} "
        f"({'new' if result.changed else 'unchanged'}, {seconds_since(started)})")
    return result


def run_ingest(paths: Paths, snapshot_id: str | None) -> None:
    """Ingest `snapshot_id` (or a bare commit hash of it; None: the one the last fetch delivered) into the
    generation `paths` writes."""
    from pipeline.archive import held_snapshot_ids, latest_snapshot_id
    from pipeline.errors import snapshot_id_for
    from pipeline.ingest import ingest

    started = time.perf_counter()
    if snapshot_id:
        fetched = {folder.name: None for folder in paths.raw_dir.iterdir()} if paths.raw_dir.is_dir() else {}
        commits = fetched | {held: commit for commit, held in held_snapshot_ids(paths).items()}
        snapshot_id = snapshot_id_for(snapshot_id, commits)
    snapshot_id = snapshot_id or latest_snapshot_id(paths)
    result = ingest(paths, snapshot_id)
    _warn("ingest", result.notices)
    configurations = sum(result.row_counts.get(t, 0) for t in ("token_configurations", "diffusion_configurations"))
    say(f"ingest: {snapshot_id}: {configurations:,} configurations, {sum(result.row_counts.values()):,} rows in "
        f"{len(result.row_counts)} tables ({seconds_since(started)})")


def run_build(options: Options, paths: Paths, full: bool) -> str:
    """Build the database of the generation `paths` writes; returns the snapshot its index is built from."""
    from pipeline.build import build

    started = time.perf_counter()
    result = build(paths, options.itl_deadline_ms, options.index_snapshot, full, latency_tiers=options.latency_tiers,
                   retrieved=options.retrieved)
    _warn("build", result.notices)
    fitted = len(result.fitting_seconds)
    if fitted:
        say(f"fit: the efficiency curves of {fitted} snapshot{'s' if fitted > 1 else ''} "
            f"({sum(result.fitting_seconds):.2f} s)")
    how = "appended to the published database" if result.appended else "built from every Parquet file"
    say(f"build: {len(result.views)} views and macros, {how} ({seconds_since(started)})")
    return result.index_snapshot


def build_published(options: Options, paths: Paths, full: bool) -> str:
    """The build command's run_build: it appends only to a published database that is as it was published
    (a refresh checks every published file before it builds), since what it appends to keeps its views and
    macros (views.create_views); a database that differs is built again from every Parquet file, said once."""
    from pipeline.published import damaged_files

    published = Paths(paths.out)
    if not full and (damaged := damaged_files(published, names={published.database.name})) != []:
        problem = "its published record is missing or unreadable" if damaged is None else damaged[0][1]
        say(f"build: warning: {published.database}: {problem}; building it from every Parquet file")
        full = True
    return run_build(options, paths, full)


def run_export(options: Options, paths: Paths) -> None:
    from pipeline.export import export

    started = time.perf_counter()
    result = export(paths, as_of=options.as_of, retrieved=options.retrieved)
    say(f"export: {result.task_count} tasks, {result.model_file_count} model files ({seconds_since(started)})")


def update_published(label: str, options: Options, paths: Paths, digests: dict[str, str]) -> tuple[str, int] | None:
    """Bring the published build up to the snapshots of `digests` (id -> content digest, in commit order)
    beside those it holds, the index on options.index_snapshot or else the newest: repair, ingest, build and
    export in a new generation, published at once (pipeline/publish.py). Returns the index's snapshot and how
    many were ingested; None, with nothing written, when the published build already is this one with its
    files intact."""
    import msgspec

    from pipeline.archive import check_archive
    from pipeline.files import write_json_atomic
    from pipeline.fingerprint import file_sha256
    from pipeline.paths import code_digest
    from pipeline.private_folders import sweep_private_folders
    from pipeline.progress import each
    from pipeline.publish import REFRESH_RECORD, new_generation
    from pipeline.published import FILE_RECORD, damaged_files

    sweep_private_folders()  # the spill of sql calls killed with their query's process at once
    try:
        previous = msgspec.json.decode((paths.current / REFRESH_RECORD).read_bytes(), type=dict)
    except (OSError, msgspec.DecodeError):
        previous = {}
    held = previous.get("snapshots", {})
    # What decides "nothing to do": the snapshots in the database, which one the index shows, the
    # parameters and the code. Any other write removes the record, so what it names is what the database holds.
    record = {"snapshots": dict(sorted({**held, **digests}.items())), "index": options.index_snapshot or "newest",
              "itl_deadline_ms": options.itl_deadline_ms, "latency_tiers": file_sha256(options.latency_tiers),
              "as_of": options.as_of, "retrieved": options.retrieved, "code": code_digest()}
    damaged = damaged_files(paths)
    for name, problem in damaged or []:
        say(f"{label}: warning: {paths.current / name}: {problem}; building it again")
    if damaged is None and record == previous:
        say(f"{label}: warning: {paths.current / FILE_RECORD} is missing or unreadable, so the published "
            "files cannot be checked; building them again")
        damaged = [(FILE_RECORD, "missing or unreadable")]
    if damaged == [] and record == previous:
        return None
    # Ingesting depends on the snapshot and the code only: with the same code, what the database holds
    # with the same content is not ingested again.
    same_code = previous.get("code") == record["code"]
    history = label == "history"  # ingests only what the database lacks; a refresh, its one snapshot
    ingest = [s for s in digests if not (history and same_code and held.get(s) == digests[s])]
    check_archive(paths, ingest)  # every copy whole before anything is ingested from it
    with new_generation(paths) as staged:
        for snapshot_id in _repair(staged, damaged or [], ingest):
            run_ingest(staged, snapshot_id)
        for snapshot_id in each(ingest, "history: ingesting", "snapshot", logged=True) if history else ingest:
            run_ingest(staged, snapshot_id)
        index_snapshot = run_build(options, staged, full=bool(damaged))
        run_export(options, staged)
        write_json_atomic(staged.generation / REFRESH_RECORD, record)
    say(f"published: {paths.out / 'energy_index.duckdb'}, {paths.out / 'parquet'}/, {paths.out / 'index'}/")
    return index_snapshot, len(ingest)


def _repair(staged: Paths, damaged: list[tuple[str, str]], ingesting: list[str]) -> list[str]:
    """Make the damaged files of a staged generation whole; return the snapshots to ingest again besides
    `ingesting`: a derived file is computed again by the full build, an ingested file's snapshot ingested
    again from its fetched copy in OUT/raw."""
    from pipeline.archive import MANIFEST, check_archive
    from pipeline.stored_tables import STORED
    from pipeline.paths import hive_key

    again = []
    for name, problem in damaged:
        parts = name.split("/")
        if len(parts) != 4 or parts[0] != "parquet" or not parts[2].startswith(f"{hive_key(parts[1])}="):
            continue
        table, snapshot_id = parts[1], parts[2].removeprefix(f"{hive_key(parts[1])}=")
        if table in STORED:
            (staged.generation / name).unlink(missing_ok=True)
        elif snapshot_id not in ingesting and not (staged.raw_snapshot(snapshot_id) / MANIFEST).is_file():
            raise PipelineError(
                f"{staged.current / name}: {problem}, and snapshot {snapshot_id} has no fetched copy in "
                f"{staged.raw_dir} to ingest again; fetch it (energy-index fetch --source ...) and run again")
        else:
            again.append(snapshot_id)
    again = [snapshot_id for snapshot_id in dict.fromkeys(again) if snapshot_id not in ingesting]
    check_archive(staged, again)
    return again


def announce(paths: Paths, what: str, started: float, every_snapshot: bool = False) -> "Outcome":
    """After a publish: the audit summary (of `every_snapshot` after a history), the audit findings the
    previous published build did not have (printed even when quiet), then the one summary line, `what` was
    published and what it moved (quiet: only after new findings); what it found."""
    from pipeline.outcome import publish_outcome

    outcome = publish_outcome(paths, what, time.perf_counter() - started, every_snapshot)
    say(outcome.audit)
    for line in outcome.new_findings:
        say(line, always=True)
    say(outcome.summary, always=bool(outcome.new_findings))
    return outcome


def refresh(paths: Paths, options: Options, as_index: bool = False) -> "Outcome | None":
    """Fetch one snapshot and publish it with what the database holds: nothing when the published build
    already is this one (None); the index on the newest snapshot in the database, or on the fetched one with
    `as_index`."""
    started = time.perf_counter()
    snapshot = (fetched := run_fetch(options, paths)).snapshot_id
    # The index shows the newest snapshot, or the one fetched when as_index says so; snapshots ingested
    # before stay in the history.
    options = replace(options, index_snapshot=snapshot if as_index else None)
    updated = update_published("refresh", options, paths, {snapshot: fetched.content_sha256})
    if updated is None:
        say(f"refresh: {snapshot} is built and published with these parameters and this code; nothing to do")
        return None
    index_snapshot, where = updated[0], ""
    if index_snapshot != snapshot:
        say(f"refresh: {snapshot} is older than {index_snapshot}, the newest snapshot in the database: it is in "
            f"the history now and the index stays on {index_snapshot} (--as-index publishes {snapshot} as the index)")
        where = f" into the history, the index on {index_snapshot}"
    return announce(paths, f"refresh: published {snapshot}{where}", started)


def fetch_upstream_history(options: Options, paths: Paths, since: str | None) -> list[str]:
    """Fetch every upstream commit that changed public/data (since `since`) that OUT/raw lacks, oldest
    first, one line per commit; each fetch is complete in OUT/raw before the next starts, so a run
    stopped halfway resumes where it stopped. Returns every listed commit's snapshot id."""
    from pipeline.archive import held_snapshot_ids
    from pipeline.upstream import fetch_commit, open_github

    after = f" since {since}" if since else ""
    say(f"history: asking {settings.GITHUB_API.value()} for every commit of {settings.UPSTREAM_REPOSITORY} that "
        f"changed {settings.UPSTREAM_PATH}{after}")
    github = open_github(options.timeout, options.max_file_bytes, options.fetch_deadline)
    commits = github.history(since)
    if not commits:
        raise PipelineError(f"no commit of {settings.UPSTREAM_REPOSITORY} changed {settings.UPSTREAM_PATH}{after}")
    held = held_snapshot_ids(paths)
    missing = [commit for commit in commits if commit.sha not in held]
    say(f"history: {len(commits)} commit(s); {len(commits) - len(missing)} already fetched, {len(missing)} to fetch")
    for number, commit in enumerate(missing, start=1):
        github.reader.restart_deadline()
        started = time.perf_counter()
        result = fetch_commit(github, paths, commit, held)
        say(f"history: fetched {number}/{len(missing)}: {result.snapshot_id} ({commit.subject}), {result.file_count} "
            f"files, {result.total_bytes / 1e6:.1f} MB ({seconds_since(started)})")
    held = held_snapshot_ids(paths)
    return [held[commit.sha] for commit in commits]


def history(paths: Paths, options: Options, sources: list[str], upstream: bool = False,
            since: str | None = None) -> "Outcome | None":
    """Fetch every snapshot of `sources`, or with `upstream` every upstream commit that changed public/data
    (since `since`), and publish them all, in upstream commit order, the index on the newest (None: the
    published build already was this one)."""
    from pipeline.archive import commit_moment, content_digest, read_manifest
    from pipeline.fetch import snapshot_sources

    started = time.perf_counter()
    if upstream:
        fetched = fetch_upstream_history(options, paths, since)
    else:
        fetched = [run_fetch(options, paths, given).snapshot_id for given in snapshot_sources(sources)]
    manifests = {snapshot_id: read_manifest(paths.raw_snapshot(snapshot_id)) for snapshot_id in set(fetched)}
    undated = sorted(s for s in manifests if not manifests[s]["upstream"].get("commit_time"))
    if undated and len(undated) < len(manifests):
        raise PipelineError(
            "these snapshots have no commit time (no snapshot.json), so their place among the others would "
            "be a guess: " + ", ".join(f"{s} ({manifests[s]['source']})" for s in undated)
            + ". Give each a snapshot.json with commit_time, or refresh it on its own with --commit-time")

    def commit_order(snapshot_id: str) -> tuple[str, str, str]:
        commit_time = manifests[snapshot_id]["upstream"].get("commit_time")
        moment = commit_moment(commit_time).isoformat() if commit_time else ""
        return moment, manifests[snapshot_id]["retrieved"], snapshot_id

    in_order = sorted(manifests, key=commit_order)
    digests = {s: content_digest(manifests[s]["upstream"], manifests[s]["files"]) for s in in_order}
    if (updated := update_published("history", options, paths, digests)) is None:
        say(f"history: {len(in_order)} snapshot(s) built and published with these parameters and this code; "
            "nothing to do")
        return None
    return announce(paths, f"history: published {len(in_order)} snapshot(s), {updated[1]} ingested, the index "
                    "on the newest", started, every_snapshot=True)
