"""The energy-index command: one subcommand per step, and refresh for all of them in order."""

import argparse
import fcntl
import hashlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import NEXT_STEP, PipelineError, command_name, nearest, next_step, out_option
from pipeline.paths import LATENCY_TIERS, Paths, code_digest
from pipeline.settings import DEFAULT_OUT

if TYPE_CHECKING:
    from pipeline.fetch import FetchResult

PROG = "energy-index"
# In a generation made by refresh: the snapshot, parameters and code it was made from.
REFRESH_RECORD = "refresh.json"


def _say(message: str) -> None:
    if sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(message, file=sys.stderr)  # above any progress bar being drawn, not through it
    else:
        print(message, file=sys.stderr, flush=True)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _calendar_date(text: str) -> str:
    """A real calendar date, YYYY-MM-DD, checked before any work (it reaches the public files)."""
    import datetime
    import re

    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError
        datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a calendar date written YYYY-MM-DD, e.g. 2026-09-27") from None
    return text


def _iso_time(text: str) -> str:
    import datetime

    try:
        datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time, e.g. 2026-02-16T09:48:29Z") from None
    return text


def _source(text: str) -> str:
    """A URL, or a local folder that exists (checked before any work)."""
    if "://" not in text and not Path(text).exists():
        raise argparse.ArgumentTypeError(
            f"{text!r}: no such folder{_did_you_mean_path(Path(text))} (SOURCE must be a local public/data folder or a URL)"
        )
    return text


def _did_you_mean_path(path: Path) -> str:
    """'; did you mean ...?' with the folders beside a missing one nearest to its name, or ''."""
    parent = path.parent
    try:
        siblings = [child.name for child in parent.iterdir() if child.is_dir()] if path.name else []
    except OSError:
        return ""
    close = nearest(path.name, siblings)
    return f"; did you mean {' or '.join(repr(str(parent / name)) for name in close)}?" if close else ""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


@contextmanager
def _exclusive_lock(paths: Paths) -> Iterator[None]:
    """One command at a time per output folder; a second one stops with a clear message. Folders made
    for the lock alone (a mistyped --out, a step that found nothing to do) are removed again."""
    made = next((folder for folder in reversed([paths.out, *paths.out.parents]) if not folder.exists()), None)
    paths.out.mkdir(parents=True, exist_ok=True)
    try:
        with open(paths.lock_file, "a") as handle:  # "a": taking the lock leaves the file untouched
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PipelineError(
                    f"{paths.out}: another energy-index command is writing here (lock {paths.lock_file}); "
                    "try again when it has finished"
                ) from None
            try:
                yield
            finally:
                if made is not None and [p for p in paths.out.rglob("*") if not p.is_dir()] == [paths.lock_file]:
                    import shutil

                    shutil.rmtree(paths.out)  # nothing in it but the lock and empty folders
    finally:
        if made is not None:
            for folder in [paths.out, *paths.out.parents]:
                try:
                    folder.rmdir()  # only if empty
                except FileNotFoundError:
                    pass
                except OSError:
                    break
                if folder == made:
                    break


@contextmanager
def _new_generation(paths: Paths) -> Iterator[Paths]:
    """Yield paths into a private copy of the published build; publish it only if the block succeeds."""
    from pipeline import publish

    staged = publish.begin(paths)
    # Only a refresh says what the build was made from; any other write makes that unknown.
    (staged.generation / REFRESH_RECORD).unlink(missing_ok=True)
    try:
        yield staged
        publish.publish(staged)
    finally:
        publish.abandon(staged)


def _run_fetch(args: argparse.Namespace, paths: Paths, source: str | None = None) -> "FetchResult":
    from pipeline.fetch import fetch, move_to_current_ids

    source = source or args.source
    started = time.perf_counter()
    for old, new in move_to_current_ids(paths).items():
        _say(f"fetch: snapshot {old} is now {new} (ids take the commit's UTC date)")
    if source is None:
        result = _fetch_upstream(args, paths)
    else:
        _say(f"fetch: reading {source}")
        result = fetch(
            source, paths, timeout_s=args.timeout, max_file_bytes=args.max_file_bytes,
            fetch_deadline_s=args.fetch_deadline, commit_time=getattr(args, "commit_time", None),
        )
    for notice in result.notices:
        _say(f"fetch: warning: {notice}")
    state = "new" if result.changed else "unchanged"
    _say(
        f"fetch: {result.file_count} files, {result.total_bytes / 1e6:.1f} MB -> {result.directory} "
        f"({state}, {time.perf_counter() - started:.2f} s)"
    )
    return result


def _fetch_upstream(args: argparse.Namespace, paths: Paths) -> "FetchResult":
    """No source given: the upstream's newest commit that changed its data, or the --commit one."""
    from pipeline.fetch import GITHUB_API, UPSTREAM_PATH, UPSTREAM_REPOSITORY
    from pipeline.upstream import fetch_upstream

    if getattr(args, "commit_time", None) is not None:
        raise PipelineError("--commit-time is for a --source without snapshot.json; the upstream's commits "
                            "carry their own time")
    wanted = f"commit {args.commit}" if args.commit else f"the newest commit that changed {UPSTREAM_PATH}"
    _say(f"fetch: asking {GITHUB_API.value()} for {wanted} of {UPSTREAM_REPOSITORY}")
    result, commit = fetch_upstream(paths, args.commit, timeout_s=args.timeout, max_file_bytes=args.max_file_bytes,
                                    fetch_deadline_s=args.fetch_deadline)
    if commit is not None and args.commit and not commit.sha.startswith(args.commit):
        _say(f"fetch: commit {args.commit} did not change {UPSTREAM_PATH}; its data is that of {commit.sha[:7]} "
             f"({commit.subject})")
    if commit is not None:
        _say(f"fetch: {UPSTREAM_REPOSITORY} {commit.sha[:7]}, {commit.time}: {commit.subject}")
    return result


def _run_ingest(args: argparse.Namespace, paths: Paths, snapshot_id: str | None = None) -> None:
    from pipeline.fetch import latest_snapshot_id
    from pipeline.ingest import ingest

    started = time.perf_counter()
    snapshot_id = snapshot_id or getattr(args, "snapshot", None) or latest_snapshot_id(paths)
    result = ingest(paths, snapshot_id)
    for notice in result.notices:
        _say(f"ingest: warning: {notice}")
    configurations = sum(result.row_counts.get(t, 0) for t in ("token_configurations", "diffusion_configurations"))
    _say(f"ingest: {snapshot_id}: {configurations:,} configurations, {sum(result.row_counts.values()):,} rows in "
         f"{len(result.row_counts)} tables ({time.perf_counter() - started:.2f} s)")


def _run_build(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.build import build

    started = time.perf_counter()
    result = build(
        paths, args.itl_deadline_ms, getattr(args, "index_snapshot", None), full=getattr(args, "full", False),
        latency_tiers=args.latency_tiers,
    )
    for notice in result.notices:
        _say(f"build: warning: {notice}")
    how = "appended to the published database" if result.appended else "built from every Parquet file"
    _say(f"build: {len(result.views)} views and macros, {how} ({time.perf_counter() - started:.2f} s)")


def _run_export(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.export import export

    started = time.perf_counter()
    result = export(paths, as_of=args.as_of, retrieved=args.retrieved)
    _say(f"export: {result.task_count} tasks, {result.model_file_count} model files ({time.perf_counter() - started:.2f} s)")


def _build_record(args: argparse.Namespace, snapshots: dict[str, str], index: str) -> bytes:
    """What decides "nothing to do": the snapshots refreshed into the database (id -> content digest),
    which the index shows ("newest", or a snapshot id given with --as-index), the parameters, the code.
    Any write other than refresh or history removes it, so what it names is what the database holds."""
    record = {
        "snapshots": dict(sorted(snapshots.items())),
        "index": index,
        "itl_deadline_ms": args.itl_deadline_ms,
        "latency_tiers": hashlib.sha256(args.latency_tiers.read_bytes()).hexdigest(),
        "as_of": args.as_of,
        "retrieved": args.retrieved,
        "code": code_digest(),
    }
    return (json.dumps(record, indent=2) + "\n").encode()


def _rename_stale_snapshots(args: argparse.Namespace, staged: Paths, stale: dict[str, str], skip: set[str]) -> None:
    """Move the published build's snapshots from ids of an earlier rule to today's: their Parquet
    partitions go, and the snapshots are ingested again under the new ids (the build then drops the
    old ids' rows). `skip`: ids this command ingests anyway."""
    from pipeline.build import STORED
    from schemas import TABLES

    for old, new in sorted(stale.items()):
        _say(f"refresh: snapshot {old} is now {new} in the database (ids take the commit's UTC date)")
        for table in (*TABLES, *STORED):
            partition = staged.parquet_files(table).get(old)
            if partition is not None:
                shutil.rmtree(partition.parent)
        if new not in skip and new not in staged.parquet_files("snapshots"):
            _run_ingest(args, staged, new)


def _published_record(paths: Paths) -> dict:
    try:
        record = json.loads((paths.current / REFRESH_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _unchanged(paths: Paths, label: str, record: bytes, previous: dict) -> tuple[bool, list[tuple[str, str]]]:
    """Whether the published build is what `record` asks for and its files are intact (sizes and sha256
    recorded at publish); and the damaged files, each said, for the rebuild to replace."""
    from pipeline import publish

    damaged = publish.damaged_files(paths)
    for name, problem in damaged or []:
        _say(f"{label}: warning: {paths.current / name}: {problem}; building it again")
    same = json.loads(record) == previous
    if damaged is None and same:
        _say(f"{label}: warning: {paths.current / publish.FILE_RECORD} is missing or unreadable, so the published "
             "files cannot be checked; building them again")
        return False, [(publish.FILE_RECORD, "missing or unreadable")]
    return damaged == [] and same, damaged or []


def _repair(args: argparse.Namespace, staged: Paths, damaged: list[tuple[str, str]], ingesting: set[str]) -> None:
    """Make a staged generation whose published files were damaged whole again: the database is built
    from every Parquet file, a damaged derived file computed again, a damaged ingested file ingested
    again from the fetched snapshot in OUT/raw (the index files are rewritten by the export anyway)."""
    from pipeline.build import STORED
    from pipeline.fetch import MANIFEST
    from pipeline.paths import hive_key

    if not damaged:
        return
    args.full = True
    for name, problem in damaged:
        parts = name.split("/")
        if len(parts) != 4 or parts[0] != "parquet" or not parts[2].startswith(f"{hive_key(parts[1])}="):
            continue
        table, snapshot_id = parts[1], parts[2].removeprefix(f"{hive_key(parts[1])}=")
        if table in STORED:
            (staged.generation / name).unlink(missing_ok=True)
        elif snapshot_id not in ingesting:
            if not (staged.raw_snapshot(snapshot_id) / MANIFEST).is_file():
                raise PipelineError(
                    f"{staged.current / name}: {problem}, and snapshot {snapshot_id} has no fetched copy in "
                    f"{staged.raw_dir} to ingest again; fetch it (energy-index fetch --source ...) and run again"
                )
            _run_ingest(args, staged, snapshot_id)
            ingesting.add(snapshot_id)


def _index_snapshot(paths: Paths) -> str:
    from pipeline.database import connect

    with connect(str(paths.database), read_only=True) as connection:
        return connection.execute("select snapshot_id from index_snapshot").fetchone()[0]


def _run_refresh(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.fetch import stale_published_ids
    from pipeline.files import write_bytes_atomic

    started = time.perf_counter()
    fetched = _run_fetch(args, paths)
    previous = _published_record(paths)
    stale = stale_published_ids(paths)
    held_before = {stale.get(s, s): digest for s, digest in previous.get("snapshots", {}).items()}
    snapshots = {**held_before, fetched.snapshot_id: fetched.content_sha256}
    record = _build_record(args, snapshots, fetched.snapshot_id if args.as_index else "newest")
    unchanged, damaged = _unchanged(paths, "refresh", record, previous)
    if unchanged and not stale:
        _say(f"refresh: {fetched.snapshot_id} is built and published with these parameters and this code; nothing to do")
        return
    # The index shows the newest snapshot, or the one fetched when --as-index says so; snapshots ingested
    # before stay in the history.
    args.index_snapshot = fetched.snapshot_id if args.as_index else None
    with _new_generation(paths) as staged:
        _rename_stale_snapshots(args, staged, stale, {fetched.snapshot_id})
        _repair(args, staged, damaged, {fetched.snapshot_id})
        _run_ingest(args, staged, fetched.snapshot_id)
        _run_build(args, staged)
        index_snapshot = _index_snapshot(staged)
        _run_export(args, staged)
        write_bytes_atomic(staged.generation / REFRESH_RECORD, record)
    _report_published(paths)
    if index_snapshot != fetched.snapshot_id:
        _say(f"refresh: {fetched.snapshot_id} is older than {index_snapshot}, the newest snapshot in the database: "
             f"it is in the history now and the index stays on {index_snapshot} (--as-index publishes "
             f"{fetched.snapshot_id} as the index)")
    where = "" if index_snapshot == fetched.snapshot_id else f" into the history, the index on {index_snapshot}"
    _say(f"refresh: published {fetched.snapshot_id}{where} ({time.perf_counter() - started:.1f} s)")


def _snapshot_sources(sources: list[str]) -> list[str]:
    """Each source as given, or, for a local folder of snapshot folders, each snapshot folder in it."""
    expanded = []
    for source in sources:
        folder = Path(source)
        if "://" not in source and folder.is_dir() and not (folder / "index.json").exists():
            children = sorted(str(child) for child in folder.iterdir() if (child / "index.json").is_file())
            if not children:
                raise PipelineError(f"{source}: neither a snapshot (no index.json) nor a folder of snapshots")
            expanded.extend(children)
        else:
            expanded.append(source)
    return expanded


def _fetch_upstream_history(args: argparse.Namespace, paths: Paths) -> list[str]:
    """Fetch every upstream commit that changed public/data (since --since) that OUT/raw lacks, oldest
    first, one line per commit; each fetch is complete in OUT/raw before the next starts, so a run
    stopped halfway resumes where it stopped. Returns every listed commit's snapshot id."""
    from pipeline.fetch import GITHUB_API, UPSTREAM_PATH, UPSTREAM_REPOSITORY, held_snapshot_ids
    from pipeline.upstream import fetch_commit, open_github

    since = f" since {args.since}" if args.since else ""
    _say(f"history: asking {GITHUB_API.value()} for every commit of {UPSTREAM_REPOSITORY} that changed "
         f"{UPSTREAM_PATH}{since}")
    github = open_github(args.timeout, args.max_file_bytes, args.fetch_deadline)
    commits = github.history(args.since)
    if not commits:
        raise PipelineError(f"no commit of {UPSTREAM_REPOSITORY} changed {UPSTREAM_PATH}{since}")
    held = held_snapshot_ids(paths)
    missing = [commit for commit in commits if commit.sha not in held]
    _say(f"history: {len(commits)} commit(s); {len(commits) - len(missing)} already fetched, {len(missing)} to fetch")
    for number, commit in enumerate(missing, start=1):
        github.reader.restart_deadline()
        started = time.perf_counter()
        result = fetch_commit(github, paths, commit, held)
        _say(f"history: fetched {number}/{len(missing)}: {result.snapshot_id} ({commit.subject}), {result.file_count} "
             f"files, {result.total_bytes / 1e6:.1f} MB ({time.perf_counter() - started:.2f} s)")
    held = held_snapshot_ids(paths)
    return [held[commit.sha] for commit in commits]


def _run_history(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.fetch import commit_moment, content_digest, move_to_current_ids, read_manifest, stale_published_ids
    from pipeline.files import write_bytes_atomic

    if args.since and not args.upstream:
        raise PipelineError("--since goes with --upstream; to choose among local snapshots, name them in --source")
    started = time.perf_counter()
    for old, new in move_to_current_ids(paths).items():
        _say(f"history: snapshot {old} is now {new} (ids take the commit's UTC date)")
    if args.upstream:
        fetched = _fetch_upstream_history(args, paths)
    else:
        fetched = [_run_fetch(args, paths, source).snapshot_id for source in _snapshot_sources(args.source)]
    manifests = {snapshot_id: read_manifest(paths.raw_snapshot(snapshot_id)) for snapshot_id in set(fetched)}
    undated = sorted(s for s in manifests if not manifests[s]["upstream"].get("commit_time"))
    if undated and len(undated) < len(manifests):
        raise PipelineError(
            "these snapshots have no commit time (no snapshot.json), so their place among the others would "
            "be a guess: " + ", ".join(f"{s} ({manifests[s]['source']})" for s in undated)
            + ". Give each a snapshot.json with commit_time, or refresh it on its own with --commit-time"
        )

    def commit_order(snapshot_id: str) -> tuple[str, str, str]:
        commit_time = manifests[snapshot_id]["upstream"].get("commit_time")
        moment = commit_moment(commit_time).isoformat() if commit_time else ""
        return moment, manifests[snapshot_id]["retrieved"], snapshot_id

    in_commit_order = sorted(manifests, key=commit_order)
    stale = stale_published_ids(paths)
    digests = {s: content_digest(manifests[s]["upstream"], manifests[s]["files"]) for s in in_commit_order}
    previous = _published_record(paths)
    held_before = {stale.get(s, s): digest for s, digest in previous.get("snapshots", {}).items()}
    record = _build_record(args, {**held_before, **digests}, "newest")
    unchanged, damaged = _unchanged(paths, "history", record, previous)
    if unchanged and not stale:
        _say(f"history: {len(in_commit_order)} snapshot(s) built and published with these parameters and this "
             "code; nothing to do")
        return
    # Ingesting depends on the snapshot and the code only: with the same code, what the database holds
    # with the same content is not ingested again.
    same_code = previous.get("code") == code_digest()
    ingest = [s for s in in_commit_order if not (same_code and held_before.get(s) == digests[s])]
    args.index_snapshot = None
    with _new_generation(paths) as staged:
        _rename_stale_snapshots(args, staged, stale, set(ingest))
        _repair(args, staged, damaged, set(ingest))
        for snapshot_id in _progress(ingest, "history: ingesting"):
            _run_ingest(args, staged, snapshot_id)
        _run_build(args, staged)
        _run_export(args, staged)
        write_bytes_atomic(staged.generation / REFRESH_RECORD, record)
    _report_published(paths, every_snapshot=True)
    _say(f"history: published {len(in_commit_order)} snapshot(s), {len(ingest)} ingested, the index on the newest "
         f"({time.perf_counter() - started:.1f} s)")


def _run_snapshots(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.query import run_query

    rows = run_query(paths, """
        select s.position, s.snapshot_id, s.commit[:7] as commit, strftime(s.ordered_at, '%Y-%m-%d') as dated,
               s.commit_time is null as dated_by_fetch,
               (select count(*) from token_configurations as t where t.snapshot_id = s.snapshot_id)
               + (select count(*) from diffusion_configurations as d where d.snapshot_id = s.snapshot_id)
                   as configurations,
               s.snapshot_id = (select snapshot_id from index_snapshot) as in_index
        from snapshot_history as s order by s.position""", {}).to_pylist()
    print(f"{'#':>3}  {'snapshot':<24} {'commit':<8} {'date':<10} {'configurations':>14}")
    for row in rows:
        marks = (" <- the index" if row["in_index"] else "") + (" (dated by its fetch)" if row["dated_by_fetch"] else "")
        print(f"{row['position']:>3}  {row['snapshot_id']:<24} {row['commit'] or '—':<8} {row['dated']:<10} "
              f"{row['configurations']:>14,}{marks}")


def _run_diff(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.diff import format_json, format_text, snapshot_diff

    diff = snapshot_diff(paths, args.old, args.new)
    if diff["swapped"]:
        _say(f"diff: {args.old} is newer than {args.new} in commit order; comparing {args.new} -> {args.old}")
    if args.format == "json":
        print(format_json(diff))
    elif sys.stdout.isatty():
        import pydoc
        import shutil

        pydoc.pager(format_text(diff, args.limit, shutil.get_terminal_size().columns))
    else:
        print(format_text(diff, args.limit))


def _run_sql(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.query import run_query, write_result

    if args.query is None and args.file is None:
        raise PipelineError(
            f"give the query to run, e.g. {command_name()} sql{out_option(paths.out)} "
            "\"select * from best_configurations limit 5\", or --file FILE holding it"
        )
    if args.query is not None and args.file is not None:
        raise PipelineError("give a query or --file FILE, not both")
    if args.output is not None and _is_inside(args.output, paths.out):
        raise PipelineError(f"--output {args.output} is inside {paths.out}, the published build; write it elsewhere")
    try:
        sql = args.query if args.file is None else Path(args.file).read_text(encoding="utf-8")
    except OSError as error:
        raise PipelineError(f"{args.file}: {error.strerror}") from None
    output_format = args.format or ("table" if sys.stdout.isatty() and args.output is None else "csv")
    result = run_query(paths, sql, dict(args.param), timeout_s=args.timeout, memory_limit=args.memory_limit)
    write_result(result, output_format, args.output)
    if args.output is not None:
        _say(f"sql: {result.num_rows} row(s) -> {args.output}")


def _is_inside(path: Path, folder: Path) -> bool:
    """Whether `path` is in `folder`, as written or once symbolic links are followed (OUT's published
    names are links into its generations)."""
    import os

    for candidate in (Path(os.path.abspath(path)), path.resolve()):
        for base in (Path(os.path.abspath(folder)), folder.resolve()):
            if candidate == base or base in candidate.parents:
                return True
    return False


def _run_estimate(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.query import deployment_label, estimate

    result = estimate(paths, args.task, args.model, args.gpu, args.concurrency, args.gpus, args.precision, args.boundary)
    if args.format == "json":
        print(json.dumps(result, indent=2, default=str))
        return
    unit = result["unit"]
    rows = result["deployments"]
    print(f"{result['model_id']} on {result['gpu']}, {result['task']}, at concurrency {args.concurrency:g}"
          f"{_boundary_label(result['boundary'], result['boundary_multipliers'])}:")
    if result["min_wh_per_unit"] is None:
        print(f"  outside the measured range of all {result['deployments_measured']} deployment(s); no estimate")
    elif result["deployments_within_range"] == 1:
        (row,) = [row for row in rows if row["wh_per_unit"] is not None]
        only = ("only one deployment was measured" if result["deployments_measured"] == 1 else
                f"the only one of {result['deployments_measured']} measured deployments whose range covers it")
        print(f"  {row['wh_per_unit']:.4g} {unit} ({only}); {_repeat_interval(row)}")
    else:
        print(f"  {result['min_wh_per_unit']:.4g} to {result['max_wh_per_unit']:.4g} {unit} "
              f"over {result['deployments_within_range']} of {result['deployments_measured']} measured deployments "
              "(a choice of deployment, not an uncertainty)")
    for row in rows:
        measured = f"measured {row['lowest_measured']:.4g} to {row['highest_measured']:.4g}"
        if row["wh_per_unit"] is None:
            print(f"  - {deployment_label(row)}: {row['method']} ({measured})")
            continue
        spread = ("" if args.boundary == "gpu_only" else
                  f" (boundary factors give {row['boundary_wh_per_unit_low']:.4g} to {row['boundary_wh_per_unit_high']:.4g})")
        print(f"  - {deployment_label(row)}: {row['wh_per_unit']:.4g}{spread}, {_repeat_interval(row)}; "
              f"{row['latency_metric']} {row['latency']:.4g}")
        if row["method"] == "measured":
            print(f"    measured point: concurrency {row['lower_x']:.4g} -> "
                  f"{_point(row['lower_wh_per_unit'], row['lower_n_repeats'])}")
        else:
            print(f"    interpolated between measured points: concurrency {row['lower_x']:.4g} -> "
                  f"{_point(row['lower_wh_per_unit'], row['lower_n_repeats'])} and {row['upper_x']:.4g} -> "
                  f"{_point(row['upper_wh_per_unit'], row['upper_n_repeats'])} ({measured})")
    print(f"  method: {result['method']}")


def _boundary_label(boundary: str, multipliers: dict[str, float]) -> str:
    """Nothing for GPU-only figures (the measurement itself); otherwise what scaled them."""
    if boundary == "gpu_only":
        return ""
    return (f", {boundary} boundary: GPU energy × {multipliers['central']:.3g} (range {multipliers['low']:.3g} to "
            f"{multipliers['high']:.3g}; assumed factors from the cited sources in boundary_factors, not measured)")


def _repeat_interval(row: dict) -> str:
    if row["lower_n_repeats"] == 1 and row["upper_n_repeats"] == 1:
        return "no repeat spread (each point measured once)"
    return f"repeats give {row['wh_per_unit_low']:.4g} to {row['wh_per_unit_high']:.4g}"


def _point(wh_per_unit: float, repeats: int) -> str:
    return f"{wh_per_unit:.4g}" + (f" (mean of {repeats} repeats)" if repeats > 1 else "")


def _run_report(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.report import write_report

    started = time.perf_counter()
    page, charts = write_report(paths)
    _say(f"report: {charts} charts -> {page} (and one PNG per chart beside it) ({time.perf_counter() - started:.2f} s)")


def _run_release(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.release import write_release

    started = time.perf_counter()
    target = write_release(paths)
    _say(f"release: {target} ({time.perf_counter() - started:.2f} s)")


def _run_spark_sql(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.files import write_bytes_atomic
    from pipeline.spark import spark_sql

    script = spark_sql(paths, args.parquet_root)
    if args.output is None:
        sys.stdout.write(script)
    else:
        write_bytes_atomic(Path(args.output), script.encode())
        _say(f"spark-sql: {script.count('CREATE OR REPLACE TEMPORARY VIEW')} temporary views -> {args.output}")


def _run_synth(args: argparse.Namespace, paths: Paths) -> None:
    from pipeline.synth import synthesize

    started = time.perf_counter()
    counts = synthesize(Path(args.source), Path(args.target), args.scale, args.seed)
    _say(
        f"synth: {counts['configurations']} configurations, {counts['model_files']} model files, "
        f"{counts['bytes'] / 1e6:.1f} MB -> {args.target} ({time.perf_counter() - started:.2f} s)"
    )


def _report_published(paths: Paths, every_snapshot: bool = False) -> None:
    from pipeline.audit import audit_summary

    _say(f"published: {paths.out / 'energy_index.duckdb'}, {paths.out / 'parquet'}/, {paths.out / 'index'}/")
    _say(audit_summary(paths, every_snapshot))


def _progress(items: list[str], label: str) -> Iterator[str]:
    """Yield `items`, with a bar that updates in place on a terminal; in a log or under cron, one line
    per item instead (tqdm draws only where stderr is a terminal)."""
    if not sys.stderr.isatty():
        for number, item in enumerate(items, start=1):
            _say(f"{label} {number}/{len(items)}: {item}")
            yield item
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=label, unit="snapshot", leave=False, file=sys.stderr, ncols=100)


def _add_fetch_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.settings import GITHUB_API, GITHUB_RAW, UPSTREAM_PATH, UPSTREAM_REPOSITORY

    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--source", type=_source,
        help="a local directory with the upstream public/data layout (index.json, tasks/, models/), or an "
        f"http(s):// URL of one (default: follow the upstream: the newest commit of {UPSTREAM_REPOSITORY} "
        f"that changed {UPSTREAM_PATH}, asked of ${GITHUB_API.environment_variable}, files from "
        f"${GITHUB_RAW.environment_variable}; GITHUB_TOKEN is sent to the API when set)",
    )
    where.add_argument(
        "--commit", type=_commit_ref, metavar="SHA",
        help=f"fetch the upstream at this commit (7 to 40 hex digits) instead of its newest; a commit already "
        "in OUT/raw needs no network",
    )
    _add_transfer_options(parser)


def _commit_ref(text: str) -> str:
    from pipeline.settings import COMMIT_PATTERN as REF_PATTERN

    if not REF_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a commit hash (7 to 40 lower-case hex digits, e.g. 7885788)")
    return text


def _add_transfer_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.settings import DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES, DEFAULT_TIMEOUT_S

    parser.add_argument(
        "--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"give up on a file of a URL that has not fully arrived after this long (default: {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-file-bytes", type=_positive_int, default=DEFAULT_MAX_FILE_BYTES, metavar="BYTES",
        help=f"refuse any upstream file larger than this (default: {DEFAULT_MAX_FILE_BYTES})",
    )
    parser.add_argument(
        "--fetch-deadline", type=_positive_float, default=DEFAULT_FETCH_DEADLINE_S, metavar="SECONDS",
        help=f"give up on a URL fetch that has not finished after this long (default: {DEFAULT_FETCH_DEADLINE_S:g})",
    )


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.source_card import load_source_card

    default_deadline = load_source_card().token.default_itl_deadline_ms
    parser.add_argument(
        "--itl-deadline-ms", type=_positive_float, default=float(default_deadline), metavar="MS",
        help=f"median inter-token latency ceiling for the best configurations (default: {default_deadline},"
        " the leaderboard's own)",
    )
    parser.add_argument(
        "--latency-tiers", type=_existing_file, default=LATENCY_TIERS, metavar="FILE",
        help="the latency tiers of tiered_best_configurations and tiers.json, in the layout of "
        "pipeline/latency_tiers.toml (default: that file)",
    )


def _existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return path


def _add_full_build_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--full", action="store_true",
        help="load every snapshot's Parquet into a new database (default: append what is new to a copy of the "
        "published database when it was built by this code; the result is the same)",
    )


def _add_export_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as-of", metavar="YYYY-MM-DD", type=_calendar_date,
        help="the index's 'updated' and 'data_version' date (default: the snapshot's retrieval date, so that "
        "a rerun on unchanged input writes identical files)",
    )
    parser.add_argument(
        "--retrieved", metavar="YYYY-MM-DD", type=_calendar_date,
        help="the 'source.retrieved' date (default: the date the fetch first retrieved the snapshot)",
    )


def _add_index_snapshot_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--snapshot", dest="index_snapshot", metavar="ID",
        help="snapshot the index and the current-snapshot views are built from (default: the newest ingested)",
    )


def _add_as_index_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as-index", action="store_true",
        help="publish the fetched snapshot as the index even when the database holds a newer one (default: an "
        "older snapshot is ingested into the history and the index stays on the newest, which refresh says)",
    )


def _add_ingest_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--snapshot", metavar="ID",
        help="snapshot id under OUT/raw/ to ingest (default: the one the last fetch delivered)",
    )


def _add_commit_time_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--commit-time", type=_iso_time, metavar="TIME",
        help="the upstream commit time of a source that has no snapshot.json (ISO 8601, e.g. "
        "2026-02-16T09:48:29Z): it places the snapshot in the history; without it, a folder without "
        "snapshot.json is ordered by the day it was first fetched",
    )


def _add_history_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.settings import UPSTREAM_PATH, UPSTREAM_REPOSITORY

    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--source", type=_source, nargs="+", metavar="SOURCE",
        help="snapshots to ingest: local public/data folders or URLs, or a folder holding snapshot folders "
        "(e.g. ../shared/upstream/ml-energy-leaderboard)",
    )
    where.add_argument(
        "--upstream", action="store_true",
        help=f"every commit of {UPSTREAM_REPOSITORY} that changed {UPSTREAM_PATH}: fetch each one OUT/raw "
        "lacks and ingest each one the database lacks, oldest first; a stopped run resumes where it stopped",
    )
    parser.add_argument(
        "--since", type=_calendar_date, metavar="YYYY-MM-DD",
        help="with --upstream: only the commits made on or after this date (UTC)",
    )
    _add_transfer_options(parser)


def _add_diff_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD", help="snapshot id to compare from ('energy-index snapshots' lists them)")
    parser.add_argument("new", metavar="NEW", help="snapshot id to compare to")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="text: a summary by field with examples (default); json: every change")
    parser.add_argument("--limit", type=_positive_int, default=20, metavar="N",
                        help="in text, list at most N configurations and index rows per group (default: 20)")


def _parameter(text: str) -> tuple[str, object]:
    from pipeline.query import parse_parameter

    try:
        return parse_parameter(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_sql_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.settings import DEFAULT_SQL_MEMORY_LIMIT as DEFAULT_MEMORY_LIMIT
    from pipeline.settings import DEFAULT_SQL_TIMEOUT_S as DEFAULT_TIMEOUT_S
    from pipeline.settings import SQL_FORMATS as FORMATS

    parser.add_argument("query", nargs="?", metavar="QUERY", help="one read-only SQL statement")
    parser.add_argument("--file", metavar="FILE", help="read the statement from FILE instead")
    parser.add_argument("--param", type=_parameter, action="append", default=[], metavar="NAME=VALUE",
                        help="bind $NAME in the query (numbers bind as numbers); repeat for more")
    parser.add_argument("--format", choices=FORMATS,
                        help="table (default on a terminal), csv (default otherwise), jsonl or parquet")
    parser.add_argument("--output", type=Path, metavar="FILE",
                        help="write the result to FILE (replaced atomically) instead of standard output; "
                        "never inside OUT")
    parser.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"stop the query after this long (default: {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--memory-limit", type=_memory_size, default=DEFAULT_MEMORY_LIMIT, metavar="SIZE",
                        help="the most memory the query may use, and spill to a temporary folder outside "
                        f"OUT (default: {DEFAULT_MEMORY_LIMIT})")


def _memory_size(text: str) -> str:
    import re

    if not re.fullmatch(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", text.strip(), re.IGNORECASE):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size, e.g. 500MB or 8GB")
    return text.strip()


def _add_estimate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True,
                        help="task, e.g. lm-arena-chat or text-to-image (any case, or a part naming one task: arena)")
    parser.add_argument("--model", required=True, help="model_id or its slug, e.g. Qwen/Qwen3-8B or qwen3-8b")
    parser.add_argument("--gpu", required=True, help="GPU model, e.g. H100 (any case)")
    parser.add_argument("--concurrency", type=_positive_float, required=True, metavar="N",
                        help="requests in flight (token tasks) or batch size (diffusion)")
    parser.add_argument("--gpus", type=_positive_int, metavar="K", help="only deployments on K GPUs")
    parser.add_argument("--precision", help="only deployments of this weight precision, e.g. BF16 or FP8")
    # pipeline.query.BOUNDARIES, spelled out: importing it would load DuckDB for every command's parser.
    parser.add_argument("--boundary", choices=("gpu_only", "server", "facility"), default="gpu_only",
                        help="where energy is counted: gpu_only (default, as measured), server (× the server factor) "
                             "or facility (× the server and facility factors); see docs/boundaries.md")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="text (default) or json")


def _add_spark_sql_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parquet-root", metavar="URI",
        help="where Spark finds the published Parquet folder (OUT/parquet), e.g. s3a://bucket/energy-index/parquet "
        "after copying it there (default: OUT/parquet's absolute path on this machine)",
    )
    parser.add_argument("--output", metavar="FILE", help="write the script to FILE (default: standard output)")


def _add_synth_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", type=_positive_int, required=True, metavar="N",
                        help="how many times the source's configurations to write (1 copies it)")
    parser.add_argument("--source", required=True, metavar="DIR", help="a local snapshot folder to replicate")
    parser.add_argument("--target", required=True, metavar="DIR",
                        help="folder to write the synthetic snapshot into (replaced if it exists)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the value perturbations (default: 0)")


class _HelpFormatter(argparse.HelpFormatter):
    """Wrapped descriptions (argparse's default), and the examples epilog kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


@dataclass(frozen=True)
class Step:
    name: str
    summary: str
    description: str
    option_groups: list[Callable[[argparse.ArgumentParser], None]]
    handler: Callable[[argparse.Namespace, Paths], None]
    examples: list[str]
    uses_out: bool = True


def make_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
        help="folder for every output: raw/, parquet/, energy_index.duckdb, index/ (default: build)",
    )
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Turn the ML.ENERGY Leaderboard's published GPU-energy measurements into a validated "
        "DuckDB database and the energy index (Wh per million output tokens, per model and GPU).",
        epilog="Steps run in order fetch -> ingest -> build -> export; 'refresh' runs all four (it is what "
        "'make' runs), 'history' runs them over many snapshots, 'diff' compares two. "
        "Run '%(prog)s COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from schemas import TABLE_NAMES

    steps: list[Step] = [
        Step(
            "fetch", "copy an upstream snapshot into OUT/raw/<snapshot-id>/",
            "Copy an upstream snapshot (by default the upstream's newest commit that changed public/data; "
            "or --commit, a local folder or a URL) into OUT/raw/<snapshot-id>/ with a manifest of "
            "each file's sha256 and size, the source, the retrieval date and the upstream commit when known. "
            "An unchanged snapshot is left as it was, retrieval date included.",
            [_add_fetch_options, _add_commit_time_option], _run_fetch,
            ["energy-index fetch", "energy-index fetch --commit 7885788",
             "energy-index fetch --source ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788"],
        ),
        Step(
            "ingest", "flatten the fetched snapshot into validated Parquet tables",
            f"Flatten a fetched snapshot into OUT/parquet/<table>/snapshot_id=<id>/data.parquet, one file per table "
            f"({', '.join(TABLE_NAMES)}), each checked by its pandera schema in schemas/. Every problem is "
            "reported at once; nothing is written unless all tables pass.",
            [_add_ingest_options], _run_ingest,
            ["energy-index ingest", "energy-index ingest --snapshot 2026-02-16-7885788"],
        ),
        Step(
            "build", "build OUT/energy_index.duckdb from the Parquet tables and sql/ views",
            "Bring OUT/energy_index.duckdb up to the Parquet tables (appending to a copy of the published "
            "database, or --full: loading everything), with the views and macros in sql/, and publish it by "
            "rename once complete.",
            [_add_build_options, _add_index_snapshot_option, _add_full_build_option], _run_build,
            ["energy-index build", "energy-index build --itl-deadline-ms 250 --snapshot 2026-01-01-6e70d23"],
        ),
        Step(
            "export", "write the energy index JSON under OUT/index/",
            "Write OUT/index/<task>/models/<slug>.json per model and OUT/index/<task>/index.json and tiers.json "
            "per task from the database's views.",
            [_add_export_options], _run_export,
            ["energy-index export --as-of 2026-09-27"],
        ),
        Step(
            "refresh", "fetch, ingest, build and export in one go (what make runs)",
            "Run fetch, ingest, build and export in order, holding a lock on OUT so that two refreshes "
            "never interleave. Without --source it follows the upstream: one conditional request when "
            "nothing changed there. A failure at any step leaves the previous outputs in place; with the "
            "content, parameters and code of the published build, and its files intact (sizes and sha256 "
            "recorded at publish), it does nothing. The index shows the newest snapshot in the database; "
            "--as-index publishes an older one as the index.",
            [_add_fetch_options, _add_commit_time_option, _add_build_options, _add_export_options, _add_as_index_option],
            _run_refresh,
            ["energy-index refresh", "energy-index refresh --commit 7885788",
             "energy-index refresh --source ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788",
             "energy-index refresh --source ./my-data --commit-time 2026-03-01T12:00:00Z"],
        ),
        Step(
            "history", "ingest a list of snapshots into one database, oldest first",
            "Fetch and ingest every snapshot given, or with --upstream every upstream commit that changed "
            "public/data (in upstream commit order), then build and export once: the database holds all of "
            "them, the index shows the newest. Snapshots already in OUT stay.",
            [_add_history_options, _add_build_options, _add_export_options], _run_history,
            ["energy-index history --source ../shared/upstream/ml-energy-leaderboard",
             "energy-index history --upstream --since 2026-01-01"],
        ),
        Step(
            "snapshots", "list the snapshots in the published database",
            "List the snapshots in the published database in upstream commit order: id, commit, commit date, "
            "configurations, and which one the index shows.",
            [], _run_snapshots,
            ["energy-index snapshots"],
        ),
        Step(
            "diff", "show what changed between two ingested snapshots",
            "Report, from the published database's table macros configuration_diff and index_diff: a summary "
            "(configurations added, removed and changed per task; index rows moved), then the index rows, "
            "largest move first, the configurations added and removed, and every changed field (numbers "
            "compared with a relative tolerance of 1e-9).",
            [_add_diff_options], _run_diff,
            ["energy-index diff 2025-11-30-9fa07d1 2026-02-16-7885788",
             "energy-index diff 2025-12-01-f74deb8 2025-12-15-e0ba9ed --format json"],
        ),
        Step(
            "sql", "run one read-only query against the published database",
            "Run one read-only SQL statement against OUT/energy_index.duckdb and print the result. The "
            "database is opened read-only with file access and extension loading off: statements that "
            "write, attach, install, load or read files are refused. See the data_dictionary table for "
            "every column.",
            [_add_sql_options], _run_sql,
            ['energy-index sql "select gpu, count(*) from best_configurations group by gpu"',
             "energy-index sql --param task=gpqa --format jsonl \\\n"
             "      \"select * from best_configurations where task = \\$task\""],
        ),
        Step(
            "estimate", "energy per output of a model on a GPU at your concurrency",
            "Estimate energy per output token (or image, video) for a model on a GPU at the concurrency you run, "
            "from the index snapshot's efficiency curves: per measured deployment, interpolated linearly in log "
            "concurrency between neighbouring measured points, never extrapolated; with the range over "
            "deployments. The same figures as the SQL table macro energy_at_concurrency.",
            [_add_estimate_options], _run_estimate,
            ["energy-index estimate --task lm-arena-chat --model Qwen/Qwen3-8B --gpu H100 --concurrency 100"],
        ),
        Step(
            "report", "write OUT/report/index.html: tables and charts of the published database",
            "Write OUT/report/index.html, a self-contained page (no network needed to open it) with, per task, "
            "the index table, each model's best figure per GPU, the energy-latency frontiers, what each latency "
            "tier costs, the efficiency curves, how each index figure moved across the snapshots in the database "
            "and every latency metric's tiers; one PNG per chart beside it; and a page per model, "
            "OUT/report/models/<slug>.html (docs/report.md).",
            [], _run_report,
            ["energy-index report", "energy-index report --out /srv/energy-index/build"],
        ),
        Step(
            "release", "write OUT/release/<snapshot-id>/: a citable data release",
            "Write OUT/release/<snapshot-id>/ for the index snapshot: the index JSON files, Parquet and CSV of "
            "the main views, datapackage.json (Frictionless), croissant.json (Croissant 1.0), CITATION.cff, "
            "CHANGES.md (the index changes since the previous snapshot) and SHA256SUMS. The same database "
            "gives the same bytes.",
            [], _run_release,
            ["energy-index release", "energy-index release --out /srv/energy-index/build"],
        ),
        Step(
            "spark-sql", "write the Spark SQL of every view over the published Parquet",
            "Write a Spark SQL script: a temporary view over the published Parquet for every table (ingested, "
            "stored and reference tables), then every view of the database in dependency order, translated "
            "from sql/ with the scalar macros inlined, so that Spark needs nothing registered by hand. Run it "
            "with 'spark-sql -i FILE' or each statement with spark.sql(). The table macros are DuckDB's only.",
            [_add_spark_sql_options], _run_spark_sql,
            ["energy-index spark-sql --output energy_index_views.sql",
             "spark-sql -i energy_index_views.sql -e 'select * from best_configurations limit 5'"],
        ),
        Step(
            "synth", "write a synthetic snapshot N times a real one, for benchmarks",
            "Write a snapshot with the upstream's layout and fields, N times the source's configurations: "
            "every model replicated under new ids with energy and power scaled by a seeded factor in "
            "[0.98, 1], so every row stays valid. Deterministic for a given seed.",
            [_add_synth_options], _run_synth,
            ["energy-index synth --scale 10 --source ./public-data --target build/synth-10"],
            uses_out=False,
        ),
    ]
    for step in steps:
        examples = "examples:\n" + "\n".join(f"  {example}" for example in step.examples)
        command = commands.add_parser(
            step.name, parents=[common] if step.uses_out else [], help=step.summary, description=step.description,
            epilog=examples, formatter_class=_HelpFormatter,
        )
        for add_options in step.option_groups:
            add_options(command)
        command.set_defaults(handler=step.handler)
    return parser


def _interrupt_on_sigterm() -> None:
    """A stop from cron or a service manager (SIGTERM) is handled as Ctrl-C: cleaned up, one line, exit 1."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


def _version() -> str:
    from pipeline import __version__

    return __version__


def _unknown_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """A "did you mean" for a mistyped command (Python 3.14's argparse would say it; 3.11's does not)."""
    import difflib

    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    if first is None or first in commands:
        return None
    close = difflib.get_close_matches(first, commands, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; the commands are {', '.join(commands)}"
    return f"unknown command '{first}'{hint}"


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the command began (still importing, parsing): nothing to undo
        _say(f"{PROG}: error: interrupted before it started; nothing was changed")
        return 1


def _output_closed() -> None:
    """The reader of standard output has gone (`| head -1`): the output ends there, quietly. What is
    still buffered is dropped, so that Python's flush at exit does not fail on the closed pipe again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _main(argv: list[str] | None) -> int:
    parser = make_parser()
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments:
        parser.print_help()
        return 0
    if (problem := _unknown_command(parser, arguments)) is not None:
        parser.print_usage(sys.stderr)
        _say(f"{PROG}: error: {problem}")
        return 2
    args = parser.parse_args(arguments)
    if argv is None:
        _interrupt_on_sigterm()
    paths = Paths(getattr(args, "out", DEFAULT_OUT))
    try:
        if args.handler in (_run_diff, _run_synth, _run_sql, _run_estimate, _run_snapshots, _run_spark_sql):
            try:
                args.handler(args, paths)
                # A pipe buffers what print() wrote: flushed here, a reader that has gone is met in the try,
                # not in Python's flush at exit (a traceback-like warning and exit 120).
                sys.stdout.flush()
            except BrokenPipeError:
                _output_closed()
            return 0
        with _exclusive_lock(paths):
            if args.handler in (_run_fetch, _run_refresh, _run_history, _run_report, _run_release):
                args.handler(args, paths)
            else:
                with _new_generation(paths) as staged:
                    args.handler(args, staged)
    except PipelineError as error:
        _say(f"{PROG}: error: {str(error).replace(NEXT_STEP, next_step(paths.out))}")
        return 1
    except KeyboardInterrupt:
        _say(f"{PROG}: error: interrupted; the last published build in {paths.out} is unchanged")
        return 1
    except OSError as error:
        _say(f"{PROG}: error: {_environment_problem(error, paths.out)}")
        return 1
    except Exception as error:
        import errno

        import duckdb

        if not isinstance(error, duckdb.Error):
            raise
        if "No space left on device" in str(error):
            _say(f"{PROG}: error: {_environment_problem(OSError(errno.ENOSPC, 'no space'), paths.out)}")
        else:
            _say(f"{PROG}: error: the database engine failed: {str(error).splitlines()[0]}; "
                 f"the last published build in {paths.out} is unchanged")
        return 1
    return 0


def _environment_problem(error: OSError, out: Path) -> str:
    """One line for a failure of the machine rather than the input: what, where, what to do."""
    import errno

    where = error.filename or out
    advice = {
        errno.ENOSPC: "no space left on the device; free some space and run again",
        errno.EDQUOT: "disk quota exceeded; free some space and run again",
        errno.EACCES: "permission denied; run as a user who may write there, or choose another --out",
        errno.EPERM: "operation not permitted; run as a user who may write there, or choose another --out",
        errno.EROFS: "read-only file system; choose an --out on a writable file system",
    }.get(error.errno, error.strerror or str(error))
    return f"{where}: {advice}; the last published build in {out} is unchanged"


if __name__ == "__main__":
    sys.exit(main())
