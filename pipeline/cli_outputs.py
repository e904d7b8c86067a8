"""The commands that write other outputs from the published build (report, release, spark-sql) and synth,
which writes a synthetic snapshot for benchmarks."""

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import click

from pipeline.cli_common import OUT, POSITIVE_INTEGER, QUIET, checked, examples, step
from pipeline.paths import Paths
from pipeline.progress import say, seconds_since


@click.command("report", short_help="write OUT/report/index.html: tables and charts of the published database",
               epilog=examples("energy-index report", "energy-index report --out /srv/energy-index/build"))
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
    page, charts = write_report(checked(paths, full=True))
    say(f"report: {charts} charts -> {page} (and one PNG per chart beside it) ({seconds_since(started)})")


@click.command("release", short_help="write OUT/release/<snapshot-id>/: a citable data release",
               epilog=examples("energy-index release", "energy-index release --out /srv/energy-index/build"))
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
    say(f"release: {write_release(checked(paths, full=True))} ({seconds_since(started)})")


@click.command("spark-sql", short_help="write the Spark SQL of every view over the published Parquet",
               epilog=examples("energy-index spark-sql --output energy_index_views.sql",
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

    script = spark_sql(checked(paths), args.parquet_root)
    if args.output is None:
        sys.stdout.write(script)
    else:
        write_bytes_atomic(Path(args.output), script.encode())
        say(f"spark-sql: {script.count('CREATE OR REPLACE TEMPORARY VIEW')} temporary views -> {args.output}")


@click.command("synth", short_help="write a synthetic snapshot N times a real one, for benchmarks", epilog=examples(
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


# This module's commands, by name, as pipeline/cli.py's COMMAND_MODULES names them.
COMMANDS: dict[str, click.Command] = {command.name: command for command in (
    report_command, release_command, spark_sql_command, synth_command,
)}
