"""Export: format the database's views as the energy index JSON files (a public contract).

Views compute; this module selects rows, rounds them as the field dictionary's [exports] says and lays
them out in the seed's shape: OUT/index/<task>/models/<slug>.json per model, and
OUT/index/<task>/index.json and tiers.json per task.
"""

import datetime
import itertools
import multiprocessing
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import connect, fetch_dicts, stream_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline import jsontext
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import SourceCard, load_source_card
from schemas import dictionary


def _export_fields(name: str) -> list[tuple[str, str, int | None]]:
    """(key, view column, decimals) of one kind of exported row, from the field dictionary's [exports]."""
    return [(field["key"], field["column"], field.get("decimals")) for field in dictionary.export_fields(name)]


MODEL_FIELDS = _export_fields("model")
TIER_FIELDS = _export_fields("tier")
# Frames and frame rate describe videos only; image files leave them out.
VIDEO_ONLY_KEYS = frozenset({"num_frames", "fps"})


@dataclass(frozen=True)
class Family:
    """What differs between the token and the diffusion index files."""

    fields: list[tuple[str, str, int | None]]
    configurations_view: str
    order_by: str


FAMILIES = {
    "token": Family(_export_fields("token_configuration"), "configurations",
                    "c.gpu, c.num_gpus, c.max_num_seqs, c.repeat"),
    "diffusion": Family(_export_fields("diffusion_configuration"), "diffusion_configurations_current",
                        "c.gpu, c.num_gpus, c.batch_size, c.width, c.height, c.num_frames, c.fps, c.inference_steps, "
                        "c.ulysses_degree, c.ring_degree, c.repeat, c.source_ordinal"),
}


def energy_decimals(unit: str) -> int:
    """The decimals of Wh per `unit` (a unit label of the views) in the index files: its configuration
    field's in [exports] (wh_per_million_output_tokens, wh_per_{unit})."""
    return next(digits for family in FAMILIES.values() for key, _, digits in family.fields
                if key.format(unit=unit) == "wh_per_" + unit.replace(" ", "_"))


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True)
class RowFormat:
    """A view row to an exported row: keys in order, values rounded by Python's round() (0 decimals
    gives an integer, as the index files hold it)."""

    plan: tuple[tuple[str, str, int | None], ...]

    @classmethod
    def of(cls, fields: list[tuple[str, str, int | None]], unit: str, left_out: frozenset[str]) -> "RowFormat":
        left_out |= VIDEO_ONLY_KEYS if unit == "image" else frozenset()
        return cls(tuple((key.format(unit=unit), column, d) for key, column, d in fields if key not in left_out))

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        return {key: row[column] if digits is None or row[column] is None else
                round(row[column]) if digits == 0 else round(row[column], digits) for key, column, digits in self.plan}


@dataclass(frozen=True)
class TaskPlan:
    """What every file of one task shares: its header, family, unit label and row formats."""

    task: str
    family: str
    unit: str
    header: dict[str, Any]
    configuration_count: int
    configuration: RowFormat
    tier_format: RowFormat

    def tier(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**self.tier_format(row), "latency_limit": _number(row["latency_limit"])}

    def model(self, row: dict[str, Any]) -> dict[str, Any]:
        return {key: row[column] for key, column, _ in MODEL_FIELDS}


def task_header(card: SourceCard, task: dict[str, Any], snapshot: dict[str, Any], as_of: str, retrieved: str
                ) -> dict[str, Any]:
    """The keys every file of one task shares, up to and including 'boundary', in the seed's order."""
    family, limit, evidence = getattr(card, task["family"]), _number(task["latency_limit"]), card.compiled_evidence
    default, over = family.default_limit(task["task"]), task["over_latency_limit_count"]
    compiled, tasks_date = snapshot["last_updated"], snapshot["tasks_last_commit_date"]
    context = {
        **card.source, **task, "compiled": compiled, "retrieved": retrieved,
        "compiled_evidence": (evidence.unknown if tasks_date is None else evidence.same if tasks_date == compiled
                              else evidence.differ).format(compiled=compiled, tasks_last_commit_date=tasks_date),
        "method": family.method.format(unit=task["unit_label"]), "used_for": family.used_for,
        "selection": (family.selection if limit == default else family.selection_other_limit).format(
            limit=limit, default_limit=default, exceeding=card.index.exceeding[min(over, 2)].format(count=over)),
        "configurations": family.configurations.format(count=task["configuration_count"]),
    }
    return {
        "version": card.index.format_version, "updated": as_of, "data_version": as_of,
        "unit": card.index.unit.format(unit=task["unit_label"]), family.limit_key: limit,
        "source": {key: text.format(**context) if isinstance(text, str) else text for key, text in card.source.items()},
        "caveat": card.index.caveat, "boundary": card.index.boundary,
    }


def index_snapshot(connection: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The index snapshot's row of snapshots, dates as ISO text."""
    row = fetch_dicts(connection, "select s.* from snapshots as s join index_snapshot using (snapshot_id)", {})[0]
    return {name: value.isoformat() if isinstance(value, datetime.date) else value for name, value in row.items()}


def task_plans(connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any], as_of: str, retrieved: str
               ) -> list[TaskPlan]:
    """Each task of the index snapshot, with its unit label, latency limit and metrics from the views."""
    card, plans = load_source_card(), []
    tasks = fetch_dicts(connection, """
        select t.task, t.workload_label, s.family, s.configuration_count, s.over_latency_limit_count,
            (select any_value(p.unit_label) from configuration_points as p where p.task = s.task) as unit_label,
            if(s.family = 'token', b.itl_deadline_ms, c.batch_latency_ceiling_s) as latency_limit,
            (select list(m.latency_metric) from latency_metrics as m where m.family <> s.family) as other_metrics
        from task_summaries as s join tasks as t using (snapshot_id, task) cross join build_parameters as b
        left join latency_ceilings as c on c.task = s.task
        where s.snapshot_id = $snapshot_id order by t.task""", {"snapshot_id": snapshot["snapshot_id"]})
    for task in tasks:
        unit = task["unit_label"]
        tier_fields = [(key, column, energy_decimals(unit) if key == "wh_per_unit" else digits)
                       for key, column, digits in TIER_FIELDS]
        plans.append(TaskPlan(
            task["task"], task["family"], unit, task_header(card, task, snapshot, as_of, retrieved),
            task["configuration_count"], RowFormat.of(FAMILIES[task["family"]].fields, unit, frozenset()),
            RowFormat.of(tier_fields, unit, frozenset(task["other_metrics"]))))
    return plans


def _check_slugs_distinct(connection: duckdb.DuckDBPyConnection, snapshot_id: str) -> None:
    clashes = connection.execute("""
        select task, slug, list(distinct model_id order by model_id) from (
            select task, slug, model_id from configuration_history where snapshot_id = $id
            union all select task, slug, model_id from diffusion_configuration_history where snapshot_id = $id)
        group by task, slug having count(distinct model_id) > 1 order by task, slug""", {"id": snapshot_id}).fetchall()
    if clashes:
        raise PipelineError("model ids that would share one exported file name (slug)",
                            [f"{task}: slug {slug} for {' and '.join(ids)}" for task, slug, ids in clashes])


def _float_check(connection: duckdb.DuckDBPyConnection, columns: str, relation: str) -> str:
    """A select-list item `float_check` over the DOUBLE columns of `columns`: 2 for a row with a NaN or
    infinity (the index format has neither; msgspec would write null), 1 for a row with a float neither
    zero nor within jsontext.PLAIN_FLOAT_RANGE (the slower path spells those as json.dumps does), else 0.
    Checked in the queries that read the rows: a pass of its own would compute the views twice."""
    selected = connection.sql(f"select {columns} from {relation} limit 0")
    floats = [column for column, dtype in zip(columns.split(", "), selected.dtypes) if str(dtype) == "DOUBLE"]
    (low, high), test = jsontext.PLAIN_FLOAT_RANGE, " or ".join
    return (f"case when {test(f'not isfinite({c})' for c in floats) or 'false'} then 2 when "
            f"{test(f'{c} <> 0 and not (abs({c}) >= {low} and abs({c}) < {high})' for c in floats) or 'false'} "
            "then 1 else 0 end as float_check")


def _plain_floats(rows: list[dict[str, Any]], where: str) -> bool:
    """Whether every float of `rows` prints alike in msgspec and json.dumps; NaN and infinity refused."""
    if (worst := max((row["float_check"] for row in rows), default=0)) == 2:
        raise PipelineError("values the index format cannot hold", [f"{where}: a NaN or infinite value"])
    return worst == 0


def _rows(connection: duckdb.DuckDBPyConnection, family: Family, view: str, order_by: str, where: str,
          parameters: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A view's rows of one family with the model's fields and their float_check, in file order, a batch
    at a time (at the 1000x scale the rows as dictionaries would take gigabytes)."""
    relation = f"{view} as c join models as m on m.snapshot_id = c.snapshot_id and m.model_id = c.model_id"
    columns = ", ".join([f"m.{c}" for _, c, _ in MODEL_FIELDS if c != "slug"]
                        + [f"c.{c}" for c in sorted({column for _, column, _ in family.fields})])
    return stream_dicts(connection, f"""
        select c.task, c.slug, {columns}, {_float_check(connection, columns, relation)}
        from {relation} where c.snapshot_id = $snapshot_id and {where} order by c.task, c.slug, {order_by}""",
                        parameters)


def _rows_by_task(rows: Iterator[dict[str, Any]], tasks: list[str]) -> Iterator[list[dict[str, Any]]]:
    """The rows of each of `tasks` in turn (none where it has none), from rows in the same task order:
    one task's rows are held at a time."""
    groups = itertools.groupby(rows, key=itemgetter("task"))
    pending = next(groups, None)
    for task in tasks:
        if pending is not None and pending[0] == task:
            yield list(pending[1])
            pending = next(groups, None)
        else:
            yield []
    if pending is not None:
        raise PipelineError(f"export: rows of task {pending[0]} out of the tasks' order")


def write_model_files(database: str, snapshot_id: str, plans: list[TaskPlan], staging: str, plain_headers: bool,
                      share: int = 0, shares: int = 1) -> int:
    """Write one share of the per-model files (the models whose slug hashes to `share`) into staging.
    Runs in a worker process when the export is split; each opens the database read-only itself."""
    connection = connect(database, read_only=True)
    # A counter in the main process only (share 0): workers' output would interleave with it.
    counter = progress(None, "export: model files") if share == 0 else progress(0, "")
    try:
        written, by_task = 0, {plan.task: plan for plan in plans}
        for family_name, family in FAMILIES.items():
            where = "list_contains($tasks, c.task) and hash(c.slug) % $shares = $share"
            parameters = {"snapshot_id": snapshot_id, "share": share, "shares": shares,
                          "tasks": [plan.task for plan in plans if plan.family == family_name]}
            # The best rows first: the configurations stream, and a connection holds one result at a time.
            best: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for row in _rows(connection, family, "best_configurations", "c.gpu", where, parameters):
                best.setdefault((row["task"], row["slug"]), []).append(row)
            rows = _rows(connection, family, family.configurations_view, family.order_by, where, parameters)
            for (task, slug), group in itertools.groupby(rows, key=itemgetter("task", "slug")):
                plan, group, best_rows = by_task[task], list(group), best.get((task, slug), [])
                document = {**plan.header, **plan.model(group[0]), "gpus": sorted({row["gpu"] for row in group}),
                            "configurations": [plan.configuration(row) for row in group],
                            "best": {row["gpu"]: plan.configuration(row) for row in best_rows}}
                name = f"{task}/models/{slug}.json"
                plain = plain_headers and _plain_floats(group + best_rows, name)
                Path(staging, name).write_bytes(jsontext.dumps(document, floats_vetted=plain))
                written += 1
                counter.update(1)
        return written
    finally:
        counter.close()
        connection.close()


# From this many configurations an index is large: its model files are split across processes (for
# fewer, a second process costs more to start than it saves) and each task's tiers are read by a query
# of its own (one query for every task made DuckDB hold all their tiers at once: 5.1 GB at 1000x; for
# fewer, one query spares each task a query's fixed cost, 0.1 s of the newest snapshot's export).
LARGE_INDEX_CONFIGURATIONS = 20_000


def _write_task_files(connection: duckdb.DuckDBPyConnection, snapshot_id: str, plans: list[TaskPlan], staging: Path,
                      large: bool, plain_headers: bool) -> None:
    """Every task's index.json (its best rows) and tiers.json (its tier-best rows), streamed in task
    order: one query per family for the best rows, and for the tiers one query, or one per task when
    the index is `large`. One task's rows are held at a time."""
    def write(plan: TaskPlan, name: str, read: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
        plain = plain_headers and _plain_floats(read, f"{plan.task}/{name}")
        (staging / plan.task / name).write_bytes(jsontext.dumps({**plan.header, "rows": rows}, floats_vetted=plain))

    for family_name, family in FAMILIES.items():
        tasks = [plan for plan in plans if plan.family == family_name]
        best = _rows(connection, family, "best_configurations", "c.gpu", "list_contains($tasks, c.task)",
                     {"snapshot_id": snapshot_id, "tasks": [plan.task for plan in tasks]})
        for plan, rows in zip(tasks, _rows_by_task(best, [plan.task for plan in tasks])):
            write(plan, "index.json", rows, [{**plan.model(row), **plan.configuration(row)} for row in rows])
    tiers = "tiered_best_configurations as c"
    check = _float_check(connection, ", ".join(sorted({f"c.{c}" for _, c, _ in TIER_FIELDS})), tiers)
    for group in [[plan] for plan in plans] if large else [plans]:
        tasks = [plan.task for plan in group]
        tiered = stream_dicts(connection, f"""
            select *, {check} from {tiers} where snapshot_id = $id and list_contains($tasks, task)
            order by task, slug, gpu, latency_metric, latency_limit""", {"id": snapshot_id, "tasks": tasks})
        for plan, rows in zip(group, _rows_by_task(tiered, tasks)):
            write(plan, "tiers.json", rows, [plan.tier(row) for row in rows])


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    task_count: int
    model_file_count: int


def export(paths: Paths, *, as_of: str | None = None, retrieved: str | None = None, processes: int | None = None
           ) -> ExportResult:
    """Write OUT/index from the database. `processes` splits the model files (default: one per core
    for a large index, else one); the files are the same whatever it is."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    staging = paths.build_root / f".index-{os.getpid()}"
    connection = connect(str(paths.database), read_only=True)
    try:
        snapshot = index_snapshot(connection)
        _check_slugs_distinct(connection, snapshot["snapshot_id"])
        # The CLI has checked the dates given; the default is the snapshot's own.
        plans = task_plans(connection, snapshot, as_of or snapshot["retrieved"], retrieved or snapshot["retrieved"])
        plain_headers = all(jsontext.as_json_dumps_writes(plan.header) == plan.header for plan in plans)
        large = sum(plan.configuration_count for plan in plans) >= LARGE_INDEX_CONFIGURATIONS
        shares = processes or (max(1, min(len(os.sched_getaffinity(0)), 8)) if large else 1)
        shutil.rmtree(staging, ignore_errors=True)
        for plan in plans:
            (staging / plan.task / "models").mkdir(parents=True)
        # Before the model files, not beside them: at 1000x the two at once took 3.5 GB.
        _write_task_files(connection, snapshot["snapshot_id"], plans, staging, large, plain_headers)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        connection.close()
    try:
        arguments = (str(paths.database), snapshot["snapshot_id"], plans, str(staging), plain_headers)
        if shares == 1:
            model_file_count = write_model_files(*arguments)
        else:
            # The files are independent: each process writes the models whose slug hashes to its share.
            # Spawned, not forked: a forked child would inherit DuckDB's threads mid-flight.
            with ProcessPoolExecutor(shares - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
                others = [pool.submit(write_model_files, *arguments, share, shares) for share in range(1, shares)]
                model_file_count = write_model_files(*arguments, 0, shares) + sum(f.result() for f in others)
        replace_directory(staging, paths.index_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(paths.index_dir, len(plans), model_file_count)
