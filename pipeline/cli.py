"""The energy-index command (click): one subcommand per step, and refresh for all of them in order. It
parses the options, calls the library (the steps' workflow is pipeline/refresh.py) and prints. Each
command imports what it uses when it runs, so that --help costs click and no more."""

import datetime
import errno
import functools
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from pipeline import __version__, settings
from pipeline.errors import (NEXT_STEP, PROG, PipelineError, command_name, nearest, next_step, out_option,
                             shown)
from pipeline.paths import Paths
from pipeline.progress import say, seconds_since, set_quiet


# ---- parameter types: each a function that returns the value or raises ValueError saying why, which click
# (8.4 on) reports as "Invalid value for '--option': why", a usage error (exit 2). One rule: a value not of
# the option's form or range is a usage error; a file or folder that does not exist is not (the command line
# is well formed; what it names is missing): PipelineError, which main() reports with exit 1. Every number is
# finite and positive; a limit (seconds, bytes) also has its maximum (settings.LONGEST_LIMIT_S, LARGEST_SIZE),
# so that no value means "no limit" ----

def _read(kind: Callable[[str], float], text: str, form: str) -> float:
    """`text` read as `kind` (float or int), or the usage error naming the form it lacks."""
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{form}: {text!r}") from None


def positive_number(text: str) -> float:
    value = _read(float, text, "not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a positive number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A time limit: a positive number of seconds, at most settings.LONGEST_LIMIT_S (a day)."""
    value = _read(float, text, "not a number")
    if not 0 < value <= settings.LONGEST_LIMIT_S:  # nan and inf fail it too
        raise ValueError(f"must be a positive number of seconds, at most {settings.LONGEST_LIMIT_S} (a day), "
                         f"got {text!r}")
    return value


def byte_count(text: str) -> int:
    """A size limit: a whole number of bytes from 1 to settings.LARGEST_SIZE (1 EiB)."""
    value = int(_read(int, text, "not a whole number of bytes"))
    if not 1 <= value <= settings.LARGEST_SIZE:
        raise ValueError(f"must be from 1 to {settings.LARGEST_SIZE} bytes (1 EiB), got {text!r}")
    return value


def existing_file(option: str) -> Callable[[str], Path]:
    """The type of an option naming a file that must exist; a missing one is named with exit 1, as a missing
    SOURCE is."""
    def existing(text: str) -> Path:
        if not Path(text).is_file():
            problem = "a folder, not a file" if Path(text).is_dir() else "no such file"
            raise PipelineError(f"{option} {text!r}: {problem}")
        return Path(text)

    return existing


def calendar_date(text: str) -> str:
    """A real calendar date, YYYY-MM-DD, checked before any work (it reaches the public files)."""
    with suppress(ValueError):
        if datetime.date.fromisoformat(text).isoformat() == text:  # not 20260927, which it reads too
            return text
    raise ValueError(f"{text!r} is not a calendar date written YYYY-MM-DD, e.g. 2026-09-27")


def iso_time(text: str) -> str:
    """An ISO 8601 time with its zone (settings.time_problem), checked before any work."""
    if (problem := settings.time_problem(text)) is not None:
        raise ValueError(f"{text!r} {problem}")
    return text


def source(text: str) -> str:
    """A URL, or a local folder that exists, with the nearest folders beside a missing one."""
    folder = Path(text)
    try:
        if settings.is_url(text) or folder.exists():
            return text
    except OSError:  # a name longer than the file system allows (ENAMETOOLONG): no such folder either
        pass
    try:
        close = nearest(folder.name, [c.name for c in folder.parent.iterdir() if c.is_dir()]) if folder.name else []
    except OSError:
        close = []
    hint = f"; did you mean {' or '.join(repr(str(folder.parent / name)) for name in close)}?" if close else ""
    raise PipelineError(f"{shown(text, quoted=True)}: no such folder{hint} (SOURCE must be a local public/data "
                        "folder or a URL)")


def commit_hash(text: str) -> str:
    if not settings.COMMIT_PATTERN.match(text):
        raise ValueError(f"{shown(text, quoted=True)} is not a commit hash (7 to 40 lower-case hex digits, e.g. "
                         "7885788)")
    return text


def memory_size(text: str) -> str:
    if (size := settings.size_bytes(text)) is None:
        raise ValueError(f"{text!r} is not a size, e.g. 500MB or 8GB")
    low, high = settings.SQL_MEMORY_RANGE
    if not low <= size <= high:
        raise ValueError(f"{text!r} is outside the sizes a query can run within ({low // 1000 ** 2}MB to "
                         f"{high // 1024 ** 6}EiB)")
    return text.strip()


def parameter(text: str) -> tuple[str, Any]:
    """NAME=VALUE; a value that reads as a whole or decimal number is bound as one, else as text."""
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    for kind in (int, float):
        with suppress(ValueError):
            return name, kind(value)
    return name, value


def non_negative_number(text: str) -> float:
    """A finite number of 0 or more (a grid of 0 gCO2e per kWh is a real answer: all-renewable supply)."""
    value = _read(float, text, "not a number")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"must be a number of 0 or more, got {text!r}")
    return value


def most(kind: str, largest: float, per: str) -> Callable[[str], float]:
    """The type of a positive number with a maximum beyond which no sensible answer lies (plan's demand)."""
    def number(text: str) -> float:
        value = positive_number(text)
        if value > largest:
            raise ValueError(f"beyond any sensible fleet: at most {largest:.4g} {kind} {per}, got {text!r}")
        return value

    return number


POSITIVE_INTEGER = click.IntRange(min=1)


# ---- options many commands share, each written once ----

def option(setting: settings.Setting, **kwargs: Any) -> Callable:
    """A click option for a setting: its name, default and help from pipeline/settings.py."""
    default = settings.shown(setting)
    return click.option(setting.name, default=setting.default, help=setting.help + (
        f" (default: {default})" if default else ""), **kwargs)


def options(*decorators: Callable) -> Callable:
    return lambda function: functools.reduce(lambda f, decorate: decorate(f), reversed(decorators), function)


OUT = option(settings.OUT, type=click.Path(path_type=Path), metavar="DIR")
TRANSFER = options(
    option(settings.TIMEOUT, type=seconds, metavar="SECONDS"),
    option(settings.MAX_FILE_BYTES, type=byte_count, metavar="BYTES"),
    option(settings.FETCH_DEADLINE, type=seconds, metavar="SECONDS"),
)
FETCH = options(
    option(settings.SOURCE, type=source, metavar="SOURCE"),
    option(settings.COMMIT, type=commit_hash, metavar="SHA"),
    TRANSFER,
    option(settings.COMMIT_TIME, type=iso_time, metavar="TIME"),
)
BUILD = options(
    option(settings.ITL_DEADLINE_MS, type=positive_number, metavar="MS"),
    option(settings.LATENCY_TIERS, type=existing_file(settings.LATENCY_TIERS.name), metavar="FILE"),
)
# Every command that writes: quiet when all went well and nothing needs a person (cron mails what is printed).
QUIET = click.option("--quiet", "-q", is_flag=True, help="print nothing unless it needs attention: a failure, a "
                     "warning, or audit findings the previous published build did not have (refresh, history)")
# The commands that publish: an exit status of its own for new audit findings, for whoever wants an alert on them.
ALERT = click.option("--alert-new-findings", is_flag=True, help="exit with status 3 (not 0) when the build "
                     "published has audit findings the previous published build did not have (docs/operating.md)")
EXPORT = options(
    option(settings.AS_OF, type=calendar_date, metavar="YYYY-MM-DD"),
    option(settings.RETRIEVED, type=calendar_date, metavar="YYYY-MM-DD"),
)


def _examples(*lines: str) -> str:
    return "\b\nexamples:\n" + "\n".join(f"  {line}" for line in lines)


class ListsTables(click.Command):
    """A command whose help names the validated tables, read from the field dictionary when shown."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from schemas import TABLE_NAMES

        self.help = (self.help or "").replace("{tables}", ", ".join(TABLE_NAMES))
        super().format_help_text(ctx, formatter)


def _one_of(args: SimpleNamespace, first: str, second: str, required: bool = False) -> None:
    given = [name for name in (first, second) if getattr(args, name)]
    if len(given) == 2 or (required and not given):
        raise click.UsageError(f"give --{first} or --{second}{'' if required else ', not both'}")


def _one_demand_and_limit(args: SimpleNamespace) -> None:
    """plan: exactly one demand and one latency limit, else a usage error naming the choices."""
    from pipeline.plan import DEMANDS, LATENCIES

    for kind, names in (("demand", DEMANDS), ("latency limit", LATENCIES)):
        given = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
        if len(given) != 1:
            choices = ", ".join(f"--{name.replace('_', '-')}" for name in names)
            got = f"; got {', '.join(given)}" if given else ""
            raise click.UsageError(f"give one {kind}: one of {choices}{got}")


def step(mode: str, check: Callable[[SimpleNamespace], None] | None = None) -> Callable:
    """A command's handler(args, paths) run as `mode` says: "read" (no lock; a reader that has gone is
    the end of the output), "lock" (one writer per OUT) or "stage" (into a new generation, published
    if it completes). Every failure is one line: 1 for the pipeline's, 2 for usage (before any work); a
    handler may return another status (3: published with new audit findings, when asked for)."""

    def decorate(handler: Callable[[SimpleNamespace, Paths], None]) -> Callable[..., int]:
        @functools.wraps(handler)
        def run(**values: Any) -> int:
            args = SimpleNamespace(**values)
            if check is not None:
                check(args)
            paths = Paths(values.get("out", settings.DEFAULT_OUT))
            set_quiet(bool(values.get("quiet")))
            status = None  # a reader that has gone ends the handler without one
            published = _published(paths)
            try:
                with ExitStack() as stack:
                    if mode == "read":
                        stack.enter_context(_reader_may_leave())
                    else:
                        from pipeline.publish import exclusive_lock, new_generation  # never loaded by readers

                        stack.enter_context(exclusive_lock(paths))
                        if mode == "stage":
                            paths = stack.enter_context(new_generation(paths))
                    status = handler(args, paths)
            except (Exception, KeyboardInterrupt) as error:
                if (message := _failure(error, paths.out, _published(paths) != published)) is None:
                    raise
                say(f"{PROG}: error: {message}")
                return 1
            return status or 0

        return run

    return decorate


def _published(paths: Paths) -> str | None:
    """The generation OUT/current names (None: none), to tell whether a command that failed had published."""
    try:
        return os.readlink(paths.current)
    except OSError:
        return None


def _failure(error: BaseException, out: Path, published: bool = False) -> str | None:
    """The one line that reports a failure; None for a bug, which keeps its traceback. A failure of the
    machine rather than the input says what, where and what to do. Any error after a stop signal is the
    stop (DuckDB reports the KeyboardInterrupt raised in a query as RuntimeError('Query interrupted'));
    `published`: the command had switched OUT/current to its build when it failed."""
    unchanged = (f"the new build was published in {out} before it stopped" if published
                 else f"the last published build in {out} is unchanged")
    if isinstance(error, PipelineError) and not STOPPED_BY:
        return str(error).replace(NEXT_STEP, next_step(out))
    if isinstance(error, KeyboardInterrupt) or STOPPED_BY:
        return f"interrupted{'' if STOPPED_BY[:1] in ([], ['SIGINT']) else f' by {STOPPED_BY[0]}'}; {unchanged}"
    if type(error).__module__.split(".")[0] in ("duckdb", "_duckdb"):
        if "No space left on device" not in str(error):
            return f"the database engine failed: {str(error).splitlines()[0]}; {unchanged}"
        error = OSError(errno.ENOSPC, "no space")
    if not isinstance(error, OSError):
        return None
    advice = {
        errno.ENOSPC: "no space left on the device; free some space and run again",
        errno.EDQUOT: "disk quota exceeded; free some space and run again",
        errno.EACCES: "permission denied; run as a user who may write there, or choose another --out",
        errno.EPERM: "operation not permitted; run as a user who may write there, or choose another --out",
        errno.EROFS: "read-only file system; choose an --out on a writable file system",
    }.get(error.errno, error.strerror or str(error))
    return f"{error.filename or out}: {advice}; {unchanged}"


@contextmanager
def _reader_may_leave() -> Iterator[None]:
    """The reader of standard output may go (`| head -1`): the output ends there, quietly. What is still
    buffered is dropped, so that Python's flush at exit does not fail on the closed pipe again."""
    try:
        yield
        sys.stdout.flush()  # a reader that has gone is met here, not in Python's flush at exit
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _checked(paths: Paths, full: bool = False) -> Paths:
    """`paths`, once the published files are checked against what was published (published.check_published)."""
    from pipeline.published import check_published

    check_published(paths, full=full)
    return paths


# ---- the command line ----

class InOrder(click.Group):
    """Commands listed as they are declared: the steps in the order they run, then the readers."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=InOrder, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Steps run in order fetch -> ingest -> build -> export; 'refresh' runs all four (it is what "
             f"'make' runs), 'history' runs them over many snapshots, 'diff' compares two. Run '{PROG} COMMAND "
             "--help' for a command's options and examples.")
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    """Turn the ML.ENERGY Leaderboard's published GPU-energy measurements into a validated DuckDB database
    and the energy index (Wh per million output tokens, per model and GPU)."""


@cli.command("fetch", short_help="copy an upstream snapshot into OUT/raw/<snapshot-id>/", epilog=_examples(
    "energy-index fetch", "energy-index fetch --commit 7885788",
    "energy-index fetch --source ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788"))
@OUT
@FETCH
@QUIET
@step("lock", lambda args: _one_of(args, "source", "commit"))
def fetch_command(args: SimpleNamespace, paths: Paths) -> None:
    """Copy an upstream snapshot (by default the upstream's newest commit that changed public/data; or --commit,
    a local folder or a URL) into OUT/raw/<snapshot-id>/ with a manifest of each file's sha256 and size, the
    source, the retrieval date and the upstream commit when known. An unchanged snapshot is left as it was,
    retrieval date included; a copy that differs from its manifest is replaced."""
    from pipeline.refresh import Options, run_fetch

    run_fetch(Options.of(args), paths, full_check=True)


@cli.command("ingest", cls=ListsTables, short_help="flatten the fetched snapshot into validated Parquet tables",
             epilog=_examples("energy-index ingest", "energy-index ingest --snapshot 2026-02-16-7885788"))
@OUT
@click.option("--snapshot", metavar="ID", help="snapshot id under OUT/raw/ to ingest, or its bare commit hash "
              "(default: the one the last fetch delivered)")
@QUIET
@step("stage")
def ingest_command(args: SimpleNamespace, paths: Paths) -> None:
    """Flatten a fetched snapshot into OUT/parquet/<table>/snapshot_id=<id>/data.parquet, one file per table
    ({tables}), each checked by its pandera schema in schemas/. Every problem is reported at once; nothing is
    written unless all tables pass."""
    from pipeline.refresh import run_ingest

    run_ingest(paths, args.snapshot)


@cli.command("build", short_help="build OUT/energy_index.duckdb from the Parquet tables and sql/ views",
             epilog=_examples("energy-index build",
                              "energy-index build --itl-deadline-ms 250 --snapshot 2026-01-01-6e70d23"))
@OUT
@BUILD
@click.option("--snapshot", "index_snapshot", metavar="ID", help="snapshot (id or bare commit hash) the index and "
              "the current-snapshot views are built from (default: the newest ingested)")
@click.option("--full", is_flag=True, help="load every snapshot's Parquet into a new database (default: append "
              "what is new to a copy of the published database when it was built by this code and is as published; "
              "the result is the same)")
@option(settings.RETRIEVED, type=calendar_date, metavar="YYYY-MM-DD")
@QUIET
@step("stage")
def build_command(args: SimpleNamespace, paths: Paths) -> None:
    """Bring OUT/energy_index.duckdb up to the Parquet tables (appending to a copy of the published database,
    or --full: loading everything), with the views and macros in sql/, and publish it by rename once complete."""
    from pipeline.refresh import Options, build_published

    build_published(Options.of(args), paths, args.full)


@cli.command("export", short_help="write the energy index JSON under OUT/index/",
             epilog=_examples("energy-index export --as-of 2026-09-27"))
@OUT
@EXPORT
@QUIET
@step("stage")
def export_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write OUT/index/<task>/models/<slug>.json per model and OUT/index/<task>/index.json and tiers.json per
    task from the database's views."""
    from pipeline.refresh import Options, run_export

    run_export(Options.of(args), paths)


@cli.command("refresh", short_help="fetch, ingest, build and export in one go (what make runs)", epilog=_examples(
    "energy-index refresh", "energy-index refresh --commit 7885788",
    "energy-index refresh --source ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788",
    "energy-index refresh --source ./my-data --commit-time 2026-03-01T12:00:00Z"))
@OUT
@FETCH
@BUILD
@EXPORT
@click.option("--as-index", is_flag=True, help="publish the fetched snapshot as the index even when the database "
              "holds a newer one (default: an older snapshot is ingested into the history and the index stays on "
              "the newest, which refresh says)")
@QUIET
@ALERT
@step("lock", lambda args: _one_of(args, "source", "commit"))
def refresh_command(args: SimpleNamespace, paths: Paths) -> int:
    """Run fetch, ingest, build and export in order, holding a lock on OUT so that two refreshes never
    interleave. Without --source it follows the upstream: one conditional request when nothing changed there.
    A failure at any step leaves the previous outputs in place; with the content, parameters and code of the
    published build, and its files intact (sizes and sha256 recorded at publish), it does nothing. The index
    shows the newest snapshot in the database; --as-index publishes an older one as the index."""
    from pipeline.refresh import Options, refresh

    published = refresh(paths, Options.of(args), args.as_index)
    return 0 if published is None else published.status(args.alert_new_findings)


def _history_sources(args: SimpleNamespace) -> None:
    args.source = [*args.source, *args.more_sources]
    args.index_snapshot = None  # a history's index shows the newest snapshot
    _one_of(args, "source", "upstream", required=True)


@cli.command("history", short_help="ingest a list of snapshots into one database, oldest first", epilog=_examples(
    "energy-index history --source ../shared/upstream/ml-energy-leaderboard",
    "energy-index history --source ../shared/upstream/ml-energy-leaderboard/2025-1* --out build",
    "energy-index history --upstream --since 2026-01-01"))
@OUT
@click.option("--source", multiple=True, type=source, metavar="SOURCE", help="snapshots to ingest: local "
              "public/data folders or URLs, or a folder holding snapshot folders (e.g. "
              "../shared/upstream/ml-energy-leaderboard); more SOURCEs may follow it")
@click.argument("more_sources", nargs=-1, type=source, metavar="[SOURCE]...")
@click.option("--upstream", is_flag=True, help=f"every commit of {settings.UPSTREAM_REPOSITORY} that changed "
              f"{settings.UPSTREAM_PATH}: fetch each one OUT/raw lacks and ingest each one the database lacks, "
              "oldest first; a stopped run resumes where it stopped")
@click.option("--since", type=calendar_date, metavar="YYYY-MM-DD",
              help="with --upstream: only the commits made on or after this date (UTC)")
@TRANSFER
@BUILD
@EXPORT
@QUIET
@ALERT
@step("lock", _history_sources)
def history_command(args: SimpleNamespace, paths: Paths) -> int:
    """Fetch and ingest every snapshot given, or with --upstream every upstream commit that changed public/data
    (in upstream commit order), then build and export once: the database holds all of them, the index shows the
    newest. Snapshots already in OUT stay."""
    from pipeline.refresh import Options, history

    if args.since and not args.upstream:
        raise PipelineError("--since goes with --upstream; to choose among local snapshots, name them in --source")
    published = history(paths, Options.of(args, source=None), list(args.source), args.upstream, args.since)
    return 0 if published is None else published.status(args.alert_new_findings)


@cli.command("verify", short_help="check every published file and the raw archive, reading every byte",
             epilog=_examples("energy-index verify", "energy-index verify --quiet --out /srv/energy-index/build"))
@OUT
@QUIET
@step("lock")
def verify_command(args: SimpleNamespace, paths: Paths) -> None:
    """Check, as git fsck or restic check do, every published file against the size and sha256 recorded when it
    was published (OUT/current/published-files.json), every snapshot in the raw archive against its manifest
    (OUT/raw/<snapshot-id>/manifest.json: each file's size and sha256, and a commit's files its index.json names),
    and that every published snapshot still has its archived copy, which a full rebuild ingests again. Every
    byte is read, so it takes as long as reading OUT; a refresh with nothing to do checks the archive by size
    only. Exit 0 when all is intact; 1 naming each damaged file with the command that repairs it, in the order
    to run them. Writes nothing; holds OUT's lock, so that no refresh changes what it reads."""
    from pipeline.verify import verify

    started = time.perf_counter()
    verified = verify(paths)
    if verified.damage:
        raise PipelineError(verified.message(paths.out))
    say(f"verify: {verified.summary()}; every byte read ({seconds_since(started)})")


@cli.command("snapshots", short_help="list the snapshots in the published database",
             epilog=_examples("energy-index snapshots"))
@OUT
@step("read")
def snapshots_command(args: SimpleNamespace, paths: Paths) -> None:
    """List the snapshots in the published database in upstream commit order: id, commit, commit date,
    configurations, and which one the index shows."""
    from pipeline.database import fetch_dicts
    from pipeline.query import session

    with session(_checked(paths)) as (connection, _):
        rows = fetch_dicts(connection, """
            select s.position, s.snapshot_id, coalesce(s.commit[:7], '—') as commit,
                   strftime(s.ordered_at, '%Y-%m-%d') as dated,
                   (select count(*) from token_configurations as t where t.snapshot_id = s.snapshot_id)
                   + (select count(*) from diffusion_configurations as d where d.snapshot_id = s.snapshot_id)
                       as configurations,
                   concat(case when s.snapshot_id = (select snapshot_id from index_snapshot) then ' <- the index' end,
                          case when s.commit_time is null then ' (dated by its fetch)' end) as marks
            from snapshot_history as s order by s.position""", {})
    print(f"{'#':>3}  {'snapshot':<24} {'commit':<8} {'date':<10} {'configurations':>14}")
    for row in rows:
        print(f"{row['position']:>3}  {row['snapshot_id']:<24} {row['commit']:<8} {row['dated']:<10} "
              f"{row['configurations']:>14,}{row['marks']}")


@cli.command("diff", short_help="show what changed between two ingested snapshots", epilog=_examples(
    "energy-index diff 2025-11-30-9fa07d1 2026-02-16-7885788", "energy-index diff 9fa07d1 7885788",
    "energy-index diff 2025-12-01-f74deb8 2025-12-15-e0ba9ed --format json"))
@OUT
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@click.option("--format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a summary by field with examples; json: every change")
@click.option("--limit", type=POSITIVE_INTEGER, default=20, show_default=True, metavar="N",
              help="in text, list at most N configurations and index rows per group")
@step("read")
def diff_command(args: SimpleNamespace, paths: Paths) -> None:
    """Report what changed from snapshot OLD to NEW (ids or bare upstream commit hashes; 'energy-index
    snapshots' lists them), from the published database's table macros configuration_diff and index_diff: a
    summary (configurations added, removed and changed per task; index rows moved), then the index rows,
    largest move first, each with the upstream commits that moved it (and their subjects below), the
    configurations added and removed, and every changed field (numbers compared with a relative tolerance
    of 1e-9)."""
    from pipeline.diff import format_json, format_text, snapshot_diff

    found = snapshot_diff(_checked(paths), args.old, args.new)
    if found["swapped"]:
        say(f"diff: {args.old} is newer than {args.new} in commit order; comparing {args.new} -> {args.old}")
    if args.format == "json":
        print(format_json(found))
    elif sys.stdout.isatty():
        import pydoc
        import shutil

        pydoc.pager(format_text(found, args.limit, shutil.get_terminal_size().columns))
    else:
        print(format_text(found, args.limit))


@cli.command("sql", short_help="run one read-only query against the published database", epilog=_examples(
    'energy-index sql "select gpu, count(*) from best_configurations group by gpu"',
    "energy-index sql --param task=gpqa --format jsonl \\",
    '      "select * from best_configurations where task = \\$task"'))
@OUT
@click.argument("query", required=False, metavar="[QUERY]")
@click.option("--file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="read the statement from FILE instead")
@click.option("--param", type=parameter, multiple=True, metavar="NAME=VALUE",
              help="bind $NAME in the query (numbers bind as numbers); repeat for more")
@click.option("--format", type=click.Choice(settings.SQL_FORMATS),
              help="table (default on a terminal), csv (default otherwise), jsonl or parquet")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="write the result to FILE (replaced atomically) instead of standard output; never inside OUT")
@option(settings.SQL_TIMEOUT, type=seconds, metavar="SECONDS")
@option(settings.SQL_MEMORY_LIMIT, type=memory_size, metavar="SIZE")
@QUIET
@step("read")
def sql_command(args: SimpleNamespace, paths: Paths) -> None:
    """Run QUERY, one read-only SQL statement, against OUT/energy_index.duckdb and print the result. The
    database is opened read-only with file access and extension loading off: statements that write,
    attach, install, load or read files are refused. See the data_dictionary table for every column."""
    from pipeline.bounded_sql import run_sql

    if args.query is None and args.file is None:
        raise PipelineError(f"give the query to run, e.g. {command_name()} sql{out_option(paths.out)} "
                            "\"select * from best_configurations limit 5\", or --file FILE holding it")
    if args.query is not None and args.file is not None:
        raise PipelineError("give a query or --file FILE, not both")
    if args.output is not None and _is_inside(args.output, paths.out):
        raise PipelineError(f"--output {args.output} is inside {paths.out}, the published build; write it elsewhere")
    try:
        query = args.query if args.file is None else args.file.read_text(encoding="utf-8")
    except OSError as error:
        raise PipelineError(f"{args.file}: {error.strerror}") from None
    count = run_sql(_checked(paths), query, dict(args.param), args.format, args.output, args.timeout, args.memory_limit)
    if args.output is not None:
        say(f"sql: {count} row(s) -> {args.output}")


def _is_inside(path: Path, folder: Path) -> bool:
    """Whether `path` is in `folder`, as written or once symbolic links are followed (OUT's published
    names are links into its generations)."""
    return any(candidate.is_relative_to(base) for candidate in (Path(os.path.abspath(path)), path.resolve())
               for base in (Path(os.path.abspath(folder)), folder.resolve()))


@cli.command("estimate", short_help="energy per output of a model on a GPU at your concurrency", epilog=_examples(
    "energy-index estimate --task lm-arena-chat --model Qwen/Qwen3-8B --gpu H100 --concurrency 100"))
@OUT
@click.option("--task", required=True,
              help="task, e.g. lm-arena-chat or text-to-image (any case, or a part naming one task: arena)")
@click.option("--model", required=True, help="model_id or its slug, e.g. Qwen/Qwen3-8B or qwen3-8b")
@click.option("--gpu", required=True, help="GPU model, e.g. H100 (any case)")
@click.option("--concurrency", type=positive_number, required=True, metavar="N",
              help="requests in flight (token tasks) or batch size (diffusion); with --method fit, the batch "
              "limit (max_num_seqs) for token tasks")
@click.option("--method", type=click.Choice(["interpolation", "fit"]), default="interpolation", show_default=True,
              help="interpolation: between the measured points, never extrapolated; fit: the deployment's "
              "logistic fit as the leaderboard's data toolkit makes it, extrapolated by at most one doubling of "
              "the batch limit and only where the fit is fit for use; see docs/fits.md")
@click.option("--gpus", type=POSITIVE_INTEGER, metavar="K", help="only deployments on K GPUs")
@click.option("--precision", help="only deployments of this weight precision, e.g. BF16 or FP8")
@click.option("--boundary", type=click.Choice(settings.BOUNDARIES), default=settings.BOUNDARIES[0],
              show_default=True, help="where energy is counted: gpu_only (as measured), server (× the server "
              "factor) or facility (× the server and facility factors); see docs/boundaries.md")
@click.option("--output-tokens", type=POSITIVE_INTEGER, metavar="N",
              help="token tasks: also give Wh per response of N output tokens")
@click.option("--carbon-intensity", type=non_negative_number, metavar="G",
              help="also print operational carbon per unit, per response and per 1,000 responses for a grid of G "
              "gCO2e per kWh (your input, 0 or more; embodied emissions not included)")
@click.option("--format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text or json")
@step("read")
def estimate_command(args: SimpleNamespace, paths: Paths) -> None:
    """Estimate energy per output token (or image, video) for a model on a GPU at the concurrency you run,
    from the index snapshot's efficiency curves: per measured deployment, interpolated linearly in log
    concurrency between neighbouring measured points, never extrapolated; with the range over deployments.
    The same figures as the SQL table macro energy_at_concurrency. With --method fit: from each deployment's
    logistic fit (the SQL table macro energy_from_fit), at the batch limit asked."""
    from pipeline import query

    result = query.estimate(_checked(paths), args.task, args.model, args.gpu, args.concurrency, args.gpus,
                            args.precision, args.boundary, args.output_tokens, args.method)
    if args.carbon_intensity is not None:
        from pipeline.carbon import operational_carbon

        result["operational_carbon"] = operational_carbon(result, args.carbon_intensity)
    if args.format == "json":
        import msgspec

        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
        return
    factors = result["boundary_multipliers"]
    boundary = "" if args.boundary == "gpu_only" else (
        f", {args.boundary} boundary: GPU energy × {factors['central']:.3g} (range {factors['low']:.3g} to "
        f"{factors['high']:.3g}; assumed factors from the cited sources in boundary_factors, not measured)")
    if args.method == "fit":
        _print_fit_estimate(result, args.concurrency, boundary)
    else:
        _print_interpolation_estimate(result, args.concurrency, args.boundary, boundary)
    if args.carbon_intensity is not None:
        from pipeline.carbon import carbon_lines

        for line in carbon_lines(result["operational_carbon"], args.carbon_intensity):
            print(f"  {line}")


def _print_interpolation_estimate(result: dict, concurrency: float, boundary_name: str, boundary: str) -> None:
    from pipeline import query

    unit, rows, measured = result["unit"], result["deployments"], result["deployments_measured"]
    print(f"{result['model_id']} on {result['gpu']}, {result['task']}, at concurrency {concurrency:g}{boundary}:")
    if result["min_wh_per_unit"] is None:
        print(f"  outside the measured range of all {measured} deployment(s); no estimate")
    elif result["deployments_within_range"] == 1:
        (row,) = [row for row in rows if row["wh_per_unit"] is not None]
        only = ("only one deployment was measured" if measured == 1 else
                f"the only one of {measured} measured deployments whose range covers it")
        print(f"  {row['wh_per_unit']:.4g} {unit} ({only}); {_repeat_interval(row)}")
    else:
        print(f"  {result['min_wh_per_unit']:.4g} to {result['max_wh_per_unit']:.4g} {unit} over "
              f"{result['deployments_within_range']} of {measured} measured deployments (a choice of deployment, "
              "not an uncertainty)")
    for row in rows:
        span = f"measured {row['lowest_measured']:.4g} to {row['highest_measured']:.4g}"
        if row["wh_per_unit"] is None:
            print(f"  - {query.deployment_label(row)}: {row['method']} ({span})")
            continue
        spread = ("" if boundary_name == "gpu_only" else f" (boundary factors give "
                  f"{row['boundary_wh_per_unit_low']:.4g} to {row['boundary_wh_per_unit_high']:.4g})")
        print(f"  - {query.deployment_label(row)}: {row['wh_per_unit']:.4g}{spread}, {_repeat_interval(row)}; "
              f"{row['latency_metric']} {row['latency_s'] if row['latency_ms'] is None else row['latency_ms']:.4g}")
        lower = f"concurrency {row['lower_x']:.4g} -> {_point(row['lower_wh_per_unit'], row['lower_n_repeats'])}"
        if row["method"] == "measured":
            print(f"    measured point: {lower}")
        else:
            print(f"    interpolated between measured points: {lower} and {row['upper_x']:.4g} -> "
                  f"{_point(row['upper_wh_per_unit'], row['upper_n_repeats'])} ({span})")
    for line in query.range_lines(result):
        print(f"  {line}")
    print(f"  data: {query.snapshot_label(result)}")
    print(f"  method: {result['method']}")


def _print_fit_estimate(result: dict, batch_limit: float, boundary: str) -> None:
    from pipeline import query

    unit, rows = result["unit"], result["deployments"]
    print(f"{result['model_id']} on {result['gpu']}, {result['task']}, at batch limit {batch_limit:g}, from the "
          f"logistic fits{boundary}:")
    if result["min_wh_per_unit"] is None:
        print(f"  no fit of the {result['deployments_measured']} deployment(s) gives a figure there; no estimate")
    else:
        print(f"  {result['min_wh_per_unit']:.4g} to {result['max_wh_per_unit']:.4g} {unit} over "
              f"{result['deployments_within_range']} of {result['deployments_measured']} deployments" if
              result["deployments_within_range"] > 1 else f"  {result['min_wh_per_unit']:.4g} {unit}")
    for row in rows:
        span = f"measured batch limits {row['min_batch_limit']} to {row['max_batch_limit']}, {row['n_points']} points"
        if row["wh_per_unit"] is None:
            print(f"  - {query.deployment_label(row)}: {row['method']} ({span})")
            continue
        doublings = f"{row['doublings_outside']:.2g}"
        outside = "" if row["doublings_outside"] == 0 else \
            f", {doublings} doubling{'' if doublings == '1' else 's'} outside"
        print(f"  - {query.deployment_label(row)}: {row['wh_per_unit']:.4g}; {row['method']}{outside} ({span}); "
              f"the fit misses measured points by at most {row['in_sample_max_error']:.1%}, left-out points by "
              f"{row['leave_one_out_median_error']:.1%} (median)")
    for line in query.range_lines(result):
        print(f"  {line}")
    print(f"  data: {query.snapshot_label(result)}")
    print(f"  method: {result['method']}")


@cli.command("plan", short_help="GPUs, kW and kWh a day to serve a daily volume of a model within a latency limit",
             epilog=_examples(
    "energy-index plan --task lm-arena-chat --model qwen3-8b --tokens-per-day 1e9 --p90-itl-ms 100",
    "energy-index plan --task gpqa --model qwen3-8b --requests-per-second 20 --median-itl-ms 50",
    "energy-index plan --task gpqa --model qwen3-8b --tokens-per-day 1e8 --p99-itl-ms 50 --gpu H100",
    "energy-index plan --task text-to-image --model flux.1-dev --images-per-day 1e5 \\\n"
    "      --batch-latency-s 30"))
@OUT
@click.option("--task", required=True, help="task, e.g. lm-arena-chat or text-to-image (any case, or a part naming "
              "one task: arena)")
@click.option("--model", required=True, help="model_id or its slug, e.g. Qwen/Qwen3-8B or qwen3-8b")
@click.option("--tokens-per-day", type=most("output tokens", settings.MOST_OUTPUTS_PER_DAY, "a day"), metavar="N",
              help="demand: output tokens a day (token tasks)")
@click.option("--requests-per-second", type=most("requests", settings.MOST_REQUESTS_PER_SECOND, "a second"),
              metavar="N", help="demand: requests a second, each of the model's measured mean output length on the "
              "task (token tasks)")
@click.option("--images-per-day", type=most("images", settings.MOST_OUTPUTS_PER_DAY, "a day"), metavar="N",
              help="demand: images a day (text-to-image)")
@click.option("--videos-per-day", type=most("videos", settings.MOST_OUTPUTS_PER_DAY, "a day"), metavar="N",
              help="demand: videos a day (text-to-video)")
@click.option("--median-itl-ms", type=positive_number, metavar="MS",
              help="latency limit: median inter-token latency, inclusive (token tasks)")
@click.option("--p90-itl-ms", type=positive_number, metavar="MS",
              help="latency limit: p90 inter-token latency, inclusive (token tasks)")
@click.option("--p99-itl-ms", type=positive_number, metavar="MS",
              help="latency limit: p99 inter-token latency, inclusive (token tasks)")
@click.option("--batch-latency-s", type=positive_number, metavar="S",
              help="latency limit: batch latency, inclusive (diffusion tasks)")
@click.option("--gpu", help="only this GPU (default: every GPU the model was measured on)")
@click.option("--boundary", type=click.Choice(settings.BOUNDARIES), help="only this boundary: gpu_only (as "
              "measured), server or facility (× the boundary factors; see docs/boundaries.md) (default: all three)")
@click.option("--carbon-intensity", type=non_negative_number, metavar="G", help="also give operational gCO2e a day "
              "for a grid of G gCO2e per kWh (your input, 0 or more; embodied emissions not included)")
@click.option("--format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text or json")
@step("read", _one_demand_and_limit)
def plan_command(args: SimpleNamespace, paths: Paths) -> None:
    """Plan a fleet: per GPU the model was measured on, the configuration, replicas, GPUs, average kW and kWh a
    day (low, central, high from the boundary factors) that serve the demand within the latency limit, lowest
    energy first, and which plan needs the fewest GPUs. Of the configurations whose latency metric (repeats'
    mean) is within the limit, each is sized to replicas = ceil(demand ÷ (86,400 s × its measured throughput));
    a replica then carries u = demand ÷ (replicas × 86,400 × throughput) of its throughput at u × its measured
    concurrency (Little's law), where its energy per output is the deployment's measured curve as estimate
    interpolates it, held between the configuration's full-load figure and its measured power; the plan is
    the configuration with the lowest such energy. Power is kWh a day ÷ 24 h. The SQL table macro fleet_plan
    gives the same rows (docs/planning.md)."""
    from pipeline import plan

    (demand,) = [name for name in plan.DEMANDS if getattr(args, name) is not None]
    (metric,) = [name for name in plan.LATENCIES if getattr(args, name) is not None]
    try:
        result = plan.plan(_checked(paths), args.task, args.model, demand, getattr(args, demand), metric,
                           getattr(args, metric), args.gpu, args.boundary, args.carbon_intensity)
    except plan.BeyondAnyFleet as error:  # a range only the data shows, a usage error all the same
        raise click.BadParameter(error.reason, click.get_current_context(), param_hint=f"'{error.option}'") from None
    if args.format == "json":
        import msgspec

        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
        return
    print("\n".join(plan.text_lines(result)))


@cli.command("compare", short_help="how many times the energy of one model another uses, per GPU and boundary",
             epilog=_examples(
    "energy-index compare --task lm-arena-chat qwen3-8b qwen3-14b"))
@OUT
@click.option("--task", required=True, help="task, e.g. lm-arena-chat (any case)")
@click.argument("model_a", metavar="MODEL_A")
@click.argument("model_b", metavar="MODEL_B")
@click.option("--gpu", help="only this GPU (default: every GPU both were measured on)")
@click.option("--boundary", type=click.Choice(settings.BOUNDARIES), help="only this boundary (default: all three)")
@click.option("--format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text or json")
@step("read")
def compare_command(args: SimpleNamespace, paths: Paths) -> None:
    """"MODEL_A uses k× MODEL_B": their index figures on one task, per GPU and boundary, k per output token (per
    image or video) and per response, each with its interval from both figures' repeat ranges (the view
    model_comparisons). Where the two point opposite ways (one model's responses are much longer), it says
    so; diffusion configurations of different workloads get no k, and it names what differs ("steps 50 vs
    28"). Models by model_id or slug."""
    from pipeline import query

    result = query.compare(paths, args.task, args.model_a, args.model_b, args.gpu, args.boundary)
    if args.format == "json":
        import msgspec

        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
        return
    print("\n".join(query.comparison_lines(result)))


def _repeat_interval(row: dict) -> str:
    if row["lower_n_repeats"] == 1 and row["upper_n_repeats"] == 1:
        return "no repeat spread (each point measured once)"
    return f"repeats give {row['wh_per_unit_low']:.4g} to {row['wh_per_unit_high']:.4g}"


def _point(wh_per_unit: float, repeats: int) -> str:
    return f"{wh_per_unit:.4g}" + (f" (mean of {repeats} repeats)" if repeats > 1 else "")


@cli.command("report", short_help="write OUT/report/index.html: tables and charts of the published database",
             epilog=_examples("energy-index report", "energy-index report --out /srv/energy-index/build"))
@OUT
@QUIET
@step("lock")
def report_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write OUT/report/index.html, a self-contained page (no network needed to open it) with, per task, the
    index table, each model's best figure per GPU, the energy-latency frontiers, what each latency tier costs,
    the efficiency curves, how each index figure moved across the snapshots in the database and every latency
    metric's tiers; one PNG per chart beside it; and a page per model, OUT/report/models/<slug>.html
    (docs/report.md)."""
    from pipeline.report import write_report

    started = time.perf_counter()
    page, charts = write_report(_checked(paths, full=True))
    say(f"report: {charts} charts -> {page} (and one PNG per chart beside it) ({seconds_since(started)})")


@cli.command("release", short_help="write OUT/release/<snapshot-id>/: a citable data release",
             epilog=_examples("energy-index release", "energy-index release --out /srv/energy-index/build"))
@OUT
@QUIET
@step("lock")
def release_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write OUT/release/<snapshot-id>/ for the index snapshot: the index JSON files, Parquet and CSV of the
    main views, datapackage.json (Frictionless), croissant.json (Croissant 1.0 and RAI 1.0),
    energy-index.spdx.json (SPDX 3.0.1, AI profile), CITATION.cff, CHANGES.md (the index changes since the
    previous snapshot) and SHA256SUMS. The same database gives the same bytes."""
    from pipeline.release import write_release

    started = time.perf_counter()
    say(f"release: {write_release(_checked(paths, full=True))} ({seconds_since(started)})")


@cli.command("spark-sql", short_help="write the Spark SQL of every view over the published Parquet",
             epilog=_examples("energy-index spark-sql --output energy_index_views.sql",
                              "spark-sql -i energy_index_views.sql -e 'select * from best_configurations limit 5'"))
@OUT
@click.option("--parquet-root", metavar="URI", help="where Spark finds the published Parquet folder (OUT/parquet), "
              "e.g. s3a://bucket/energy-index/parquet after copying it there (default: OUT/parquet's absolute path "
              "on this machine)")
@click.option("--output", metavar="FILE", help="write the script to FILE (default: standard output)")
@QUIET
@step("read")
def spark_sql_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write a Spark SQL script: a temporary view over the published Parquet for every table (ingested, stored
    and reference tables), then every view of the database in dependency order, translated from sql/ with the
    scalar macros inlined, so that Spark needs nothing registered by hand. Run it with 'spark-sql -i FILE' or
    each statement with spark.sql(). The table macros are DuckDB's only."""
    from pipeline.files import write_bytes_atomic
    from pipeline.spark import spark_sql

    script = spark_sql(_checked(paths), args.parquet_root)
    if args.output is None:
        sys.stdout.write(script)
    else:
        write_bytes_atomic(Path(args.output), script.encode())
        say(f"spark-sql: {script.count('CREATE OR REPLACE TEMPORARY VIEW')} temporary views -> {args.output}")


@cli.command("synth", short_help="write a synthetic snapshot N times a real one, for benchmarks", epilog=_examples(
    "energy-index synth --scale 10 --source ./public-data --target build/synth-10"))
@click.option("--scale", type=POSITIVE_INTEGER, required=True, metavar="N",
              help="how many times the source's configurations to write (1 copies it)")
@click.option("--source", required=True, metavar="DIR", help="a local snapshot folder to replicate")
@click.option("--target", required=True, metavar="DIR",
              help="folder to write the synthetic snapshot into (replaced if it exists)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the value perturbations")
@QUIET
@step("read")
def synth_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write a snapshot with the upstream's layout and fields, N times the source's configurations: every model
    replicated under new ids with energy and power scaled by a seeded factor in [0.98, 1], so every row stays
    valid. Deterministic for a given seed."""
    from pipeline.synth import synthesize

    started = time.perf_counter()
    counts = synthesize(Path(args.source), Path(args.target), args.scale, args.seed)
    say(f"synth: {counts['configurations']} configurations, {counts['model_files']} model files, "
        f"{counts['bytes'] / 1e6:.1f} MB -> {args.target} ({seconds_since(started)})")


# The stop signals this process received (their names), first first.
STOPPED_BY: list[str] = []


def _stop(number: int, frame: object) -> None:
    """SIGINT and SIGTERM: the first raises KeyboardInterrupt (cleaned up, one line, exit 1); later ones
    are noted only, so that they cannot cut the clean-up or its line short with a traceback."""
    STOPPED_BY.append(signal.Signals(number).name)
    if len(STOPPED_BY) == 1:
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (0, or 1 when a step failed). A usage error (2) and --help
    or --version (0) end by SystemExit, before any work, as click's standalone mode would."""
    try:
        STOPPED_BY.clear()  # a run's own
        if argv is None:
            # A stop from cron or a service manager is handled as Ctrl-C: cleaned up, one line, exit 1.
            # Unless the caller ignores it (nohup, a background job) or has its own handling.
            for number, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
                if signal.getsignal(number) is default:
                    signal.signal(number, _stop)
        try:
            arguments = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
            with cli.make_context(PROG, arguments or ["--help"]) as context:
                return cli.invoke(context)
        except click.exceptions.Exit as done:
            raise SystemExit(done.exit_code) from None
        except click.UsageError as error:
            where = f" Try '{error.ctx.command_path} --help' for help." if error.ctx is not None else ""
            say(f"{PROG}: error: {error.format_message()}{where}")
            raise SystemExit(error.exit_code) from None
        except PipelineError as error:  # an argument naming what does not exist (existing_file, source)
            say(f"{PROG}: error: {error}")
            return 1
    except KeyboardInterrupt:  # before the command began (still importing, parsing): nothing to undo
        say(f"{PROG}: error: interrupted before it started; nothing was changed")
        return 1
