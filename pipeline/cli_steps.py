"""The commands of the steps, in the order they run (fetch, ingest, build, export), refresh and history, which
run them all, and verify: each parses its options and calls pipeline/refresh.py, which holds the workflow."""

import time
from types import SimpleNamespace

import click

from pipeline import settings
from pipeline.cli_common import (ALERT, OUT, QUIET, byte_count, calendar_date, commit_hash, examples, existing_file,
                                 iso_time, one_of, option, options, positive_number, seconds, source, step)
from pipeline.errors import PipelineError
from pipeline.paths import Paths
from pipeline.progress import say, seconds_since


# ---- options the steps share, each written once ----

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
EXPORT = options(
    option(settings.AS_OF, type=calendar_date, metavar="YYYY-MM-DD"),
    option(settings.RETRIEVED, type=calendar_date, metavar="YYYY-MM-DD"),
)


class ListsTables(click.Command):
    """A command whose help names the validated tables, read from the field dictionary when shown."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from schemas import TABLE_NAMES

        self.help = (self.help or "").replace("{tables}", ", ".join(TABLE_NAMES))
        super().format_help_text(ctx, formatter)


@click.command("fetch", short_help="copy an upstream snapshot into OUT/raw/<snapshot-id>/", epilog=examples(
    "energy-index fetch", "energy-index fetch --commit 7885788",
    "energy-index fetch --source ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788"))
@OUT
@FETCH
@QUIET
@step("lock", lambda args: one_of(args, "source", "commit"))
def fetch_command(args: SimpleNamespace, paths: Paths) -> None:
    """Copy an upstream snapshot (by default the upstream's newest commit that changed public/data; or --commit,
    a local folder or a URL) into OUT/raw/<snapshot-id>/ with a manifest of each file's sha256 and size, the
    source, the retrieval date and the upstream commit when known. An unchanged snapshot is left as it was,
    retrieval date included; a copy that differs from its manifest is replaced."""
    from pipeline.refresh import Options, run_fetch

    run_fetch(Options.of(args), paths, full_check=True)


@click.command("ingest", cls=ListsTables, short_help="flatten the fetched snapshot into validated Parquet tables",
               epilog=examples("energy-index ingest", "energy-index ingest --snapshot 2026-02-16-7885788"))
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


@click.command("build", short_help="build OUT/energy_index.duckdb from the Parquet tables and sql/ views",
               epilog=examples("energy-index build",
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


@click.command("export", short_help="write the energy index JSON under OUT/index/",
               epilog=examples("energy-index export --as-of 2026-09-27"))
@OUT
@EXPORT
@QUIET
@step("stage")
def export_command(args: SimpleNamespace, paths: Paths) -> None:
    """Write OUT/index/<task>/models/<slug>.json per model and OUT/index/<task>/index.json and tiers.json per
    task from the database's views."""
    from pipeline.refresh import Options, run_export

    run_export(Options.of(args), paths)


@click.command("refresh", short_help="fetch, ingest, build and export in one go (what make runs)", epilog=examples(
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
@step("lock", lambda args: one_of(args, "source", "commit"))
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
    one_of(args, "source", "upstream", required=True)


@click.command("history", short_help="ingest a list of snapshots into one database, oldest first", epilog=examples(
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


@click.command("verify", short_help="check every published file and the raw archive, reading every byte",
               epilog=examples("energy-index verify", "energy-index verify --quiet --out /srv/energy-index/build"))
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


# This module's commands, by name, as pipeline/cli.py's COMMAND_MODULES names them.
COMMANDS: dict[str, click.Command] = {command.name: command for command in (
    fetch_command, ingest_command, build_command, export_command, refresh_command, history_command, verify_command,
)}
