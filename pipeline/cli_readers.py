"""The commands that read the published build and print: snapshots, diff, sql, estimate, plan and compare."""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import click

from pipeline import settings
from pipeline.cli_common import (OUT, POSITIVE_INTEGER, QUIET, checked, examples, memory_size, most,
                                 non_negative_number, option, parameter, positive_number, seconds, step)
from pipeline.errors import PipelineError, command_name, out_option
from pipeline.paths import Paths
from pipeline.progress import say


def _one_demand_and_limit(args: SimpleNamespace) -> None:
    """plan: exactly one demand and one latency limit, else a usage error naming the choices."""
    from pipeline.plan import DEMANDS, LATENCIES

    for kind, names in (("demand", DEMANDS), ("latency limit", LATENCIES)):
        given = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
        if len(given) != 1:
            choices = ", ".join(f"--{name.replace('_', '-')}" for name in names)
            got = f"; got {', '.join(given)}" if given else ""
            raise click.UsageError(f"give one {kind}: one of {choices}{got}")


@click.command("snapshots", short_help="list the snapshots in the published database",
               epilog=examples("energy-index snapshots"))
@OUT
@step("read")
def snapshots_command(args: SimpleNamespace, paths: Paths) -> None:
    """List the snapshots in the published database in upstream commit order: id, commit, commit date,
    configurations, and which one the index shows."""
    from pipeline.database import fetch_dicts
    from pipeline.query import session

    with session(checked(paths)) as (connection, _):
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


@click.command("diff", short_help="show what changed between two ingested snapshots", epilog=examples(
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

    found = snapshot_diff(checked(paths), args.old, args.new)
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


@click.command("sql", short_help="run one read-only query against the published database", epilog=examples(
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
    count = run_sql(checked(paths), query, dict(args.param), args.format, args.output, args.timeout, args.memory_limit)
    if args.output is not None:
        say(f"sql: {count} row(s) -> {args.output}")


def _is_inside(path: Path, folder: Path) -> bool:
    """Whether `path` is in `folder`, as written or once symbolic links are followed (OUT's published
    names are links into its generations)."""
    return any(candidate.is_relative_to(base) for candidate in (Path(os.path.abspath(path)), path.resolve())
               for base in (Path(os.path.abspath(folder)), folder.resolve()))


@click.command("estimate", short_help="energy per output of a model on a GPU at your concurrency", epilog=examples(
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

    result = query.estimate(checked(paths), args.task, args.model, args.gpu, args.concurrency, args.gpus,
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
        deployments = "the one deployment measured" if measured == 1 else f"all {measured} deployments measured"
        print(f"  outside the measured range of {deployments}; no estimate")
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


@click.command("plan", short_help="GPUs, kW and kWh a day to serve a daily volume of a model within a latency limit",
               epilog=examples(
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
        result = plan.plan(checked(paths), args.task, args.model, demand, getattr(args, demand), metric,
                           getattr(args, metric), args.gpu, args.boundary, args.carbon_intensity)
    except plan.BeyondAnyFleet as error:  # a range only the data shows, a usage error all the same
        raise click.BadParameter(error.reason, click.get_current_context(), param_hint=f"'{error.option}'") from None
    if args.format == "json":
        import msgspec

        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
        return
    print("\n".join(plan.text_lines(result)))


@click.command("compare", short_help="how many times the energy of one model another uses, per GPU and boundary",
               epilog=examples(
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

    result = query.compare(checked(paths), args.task, args.model_a, args.model_b, args.gpu, args.boundary)
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


# This module's commands, by name, as pipeline/cli.py's COMMAND_MODULES names them.
COMMANDS: dict[str, click.Command] = {command.name: command for command in (
    snapshots_command, diff_command, sql_command, estimate_command, plan_command, compare_command,
)}
