"""Export: format the database's views as the energy index JSON files (a public contract).

Views compute; this module selects rows, rounds them as the field dictionary's [exports] says and lays
them out in the seed's shape: OUT/index/<task>/models/<slug>.json per model, and
OUT/index/<task>/index.json and tiers.json per task.
"""

import datetime
import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import connect, fetch_dicts, stream_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline import index_schema, index_v2, jsontext
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import SourceCard, load_source_card
from schemas import dictionary

Fields = list[tuple[str, str, int | None]]
Row = dict[str, Any]


def _export_fields(name: str, family: str | None = None) -> Fields:
    """(key, view column, decimals) of one kind of exported row, from the field dictionary's [exports]; a
    key whose column differs by family (of_family) takes `family`'s."""
    return [(field["key"], field["of_family"].get(family, field["column"]) if family else field["column"],
             field.get("decimals")) for field in dictionary.export_fields(name)]


MODEL_FIELDS = _export_fields("model")
TIER_FIELDS = _export_fields("tier")
# a tier's latency limit is latency_limit_ms for a token task, latency_limit_s for a diffusion task
TIER_FIELDS_BY_FAMILY = {family: _export_fields("tier", family) for family in ("token", "diffusion")}
# Frames and frame rate describe videos only; image files leave them out.
VIDEO_ONLY_KEYS = frozenset({"num_frames", "fps"})


@dataclass(frozen=True)
class Family:
    """What differs between the token and the diffusion index files."""

    fields: Fields
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


def _row_format(fields: Fields, unit: str, left_out: frozenset[str] = frozenset()) -> Callable[[Row], Row]:
    """A view row to an exported row: keys in order, values rounded by Python's round() (0 decimals
    gives an integer, as the index files hold it)."""
    left_out |= VIDEO_ONLY_KEYS if unit == "image" else frozenset()
    plan = [(key.format(unit=unit), column, digits) for key, column, digits in fields if key not in left_out]
    return lambda row: {key: row[column] if digits is None or row[column] is None else
                        round(row[column]) if digits == 0 else round(row[column], digits)
                        for key, column, digits in plan}


def _model(row: Row) -> Row:
    return {key: row[column] for key, column, _ in MODEL_FIELDS}


@dataclass(frozen=True)
class TaskPlan:
    """What every file of one task shares: its header (and whether its floats print alike in msgspec and
    json.dumps), its family, unit label and row formats."""

    task: str
    family: str
    unit: str
    header: dict[str, Any]
    plain_header: bool
    configuration_count: int
    configuration: Callable[[Row], Row]
    tier_format: Callable[[Row], Row]

    def tier(self, row: Row) -> Row:
        tier = self.tier_format(row)
        return {**tier, "latency_limit": _number(tier["latency_limit"])}


def task_header(card: SourceCard, task: dict[str, Any], snapshot: dict[str, Any], as_of: str, retrieved: str
                ) -> dict[str, Any]:
    """The keys every file of one task shares, up to and including 'boundary', in the seed's order."""
    family, limit, evidence = getattr(card, task["family"]), _number(task["latency_limit"]), card.compiled_evidence
    default = (card.token.default_itl_deadline_ms if task["family"] == "token"
               else card.diffusion.default_batch_latency_ceiling_s[task["task"]])
    over = task["over_latency_limit_count"]
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
    """The index snapshot's row of snapshots, dates as ISO text, with `stated_retrieved`: its retrieval date
    as the build states it (data_version.retrieved: the build's --retrieved, else the day of the fetch),
    which the files give as source.retrieved so that they and the database say one date."""
    row = fetch_dicts(connection, "select s.*, d.retrieved as stated_retrieved from snapshots as s"
                                  " join data_version as d using (snapshot_id)", {})[0]
    return {name: value.isoformat() if isinstance(value, datetime.date) else value for name, value in row.items()}


def stated_retrieved(snapshot: dict[str, Any], retrieved: str | None) -> str:
    """The files' source.retrieved: the database's (index_snapshot), which a --retrieved given to the
    export must repeat; another date would make the files and the database disagree."""
    if retrieved is not None and retrieved != snapshot["stated_retrieved"]:
        raise PipelineError(f"--retrieved {retrieved} is not the retrieval date the database was built "
                            f"with, {snapshot['stated_retrieved']}; build it with --retrieved {retrieved} "
                            "(refresh, history or build) so that the files and the database give one date")
    return snapshot["stated_retrieved"]


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
        unit, header = task["unit_label"], task_header(card, task, snapshot, as_of, retrieved)
        tier_fields = [(key, column, energy_decimals(unit) if key == "wh_per_unit" else digits)
                       for key, column, digits in TIER_FIELDS_BY_FAMILY[task["family"]]]
        plans.append(TaskPlan(
            task["task"], task["family"], unit, header, jsontext.as_json_dumps_writes(header) == header,
            task["configuration_count"], _row_format(FAMILIES[task["family"]].fields, unit),
            _row_format(tier_fields, unit, frozenset(task["other_metrics"]))))
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


def _write(staging: Path, name: str, plan: TaskPlan, document: dict[str, Any], rows: list[Row]) -> bool:
    """Write `document`, made of `rows` and the plan's header, to staging/`name`: their float_check
    says whether its floats print alike in msgspec and json.dumps, and refuses NaN and infinity. Returns
    whether every float of `rows` was found to print alike."""
    if (worst := max((row["float_check"] for row in rows), default=0)) == 2:
        raise PipelineError("values the index format cannot hold", [f"{name}: a NaN or infinite value"])
    (staging / name).write_bytes(jsontext.dumps(document, floats_vetted=plan.plain_header and worst == 0))
    return worst == 0


def _configurations(connection: duckdb.DuckDBPyConnection, family: Family, parameters: dict[str, Any]
                    ) -> Iterator[Row]:
    """The configurations of the tasks $tasks (of one family) in file order, with the model's fields,
    whether each is its model's best on its GPU (is_best) and their float_check, a batch at a time (at the
    1000x scale the rows as dictionaries would take gigabytes)."""
    relation = (f"{family.configurations_view} as c join models as m on m.snapshot_id = c.snapshot_id"
                " and m.model_id = c.model_id left join best_configurations as b"
                " on b.task = c.task and b.row_id = c.row_id and b.repeat = c.repeat")
    columns = ", ".join([f"m.{c}" for _, c, _ in MODEL_FIELDS if c != "slug"]
                        + [f"c.{c}" for c in sorted({column for _, column, _ in family.fields})])
    return stream_dicts(connection, f"""
        select c.task, c.slug, {columns}, b.row_id is not null as is_best,
            {_float_check(connection, columns, relation)}
        from {relation} where c.snapshot_id = $snapshot_id and list_contains($tasks, c.task)
        order by c.task, c.slug, {family.order_by}""", parameters)


def _rows_by_task(rows: Iterator[Row], tasks: list[str]) -> Iterator[list[Row]]:
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


# From this many configurations an index is large: each task's tiers are read by a query of its own (one
# query for every task made DuckDB hold all their tiers at once: 5.1 GB at 1000x; for fewer, one query
# spares each task a query's fixed cost, 0.1 s of the newest snapshot's export).
LARGE_INDEX_CONFIGURATIONS = 20_000


def _write_tiers(connection: duckdb.DuckDBPyConnection, snapshot_id: str, plans: list[TaskPlan], staging: Path
                 ) -> None:
    """Every task's tiers.json (its tier-best rows), streamed in task order, one task's rows held at a time."""
    tiers = "tiered_best_configurations as c"
    columns = {f"c.{c}" for fields in TIER_FIELDS_BY_FAMILY.values() for _, c, _ in fields}
    check = _float_check(connection, ", ".join(sorted(columns)), tiers)
    large = sum(plan.configuration_count for plan in plans) >= LARGE_INDEX_CONFIGURATIONS
    for group in [[plan] for plan in plans] if large else [plans]:
        tasks = [plan.task for plan in group]
        tiered = stream_dicts(connection, f"""
            select *, {check} from {tiers} where snapshot_id = $id and list_contains($tasks, task)
            order by task, slug, gpu, latency_metric, latency_limit_ms, latency_limit_s""",
            {"id": snapshot_id, "tasks": tasks})
        for plan, rows in zip(group, _rows_by_task(tiered, tasks)):
            _write(staging, f"{plan.task}/tiers.json", plan, {**plan.header, "rows": [plan.tier(r) for r in rows]},
                   rows)


def _write_configurations(connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any], plans: list[TaskPlan],
                          staging: Path) -> int:
    """Every model's file (its configurations and best rows) and every task's index.json (its models'
    best rows), one family at a time, its configurations streamed a model at a time, each also in the
    index format's version 2 (pipeline/index_v2.py). Returns how many model files (version 1) it wrote."""
    written, by_task = 0, {plan.task: plan for plan in plans}
    version2 = index_v2.Version2.read(connection, snapshot, staging)
    v2_files = {plan.task: version2.task(plan.task, plan.header, plan.unit, energy_decimals(plan.unit))
                for plan in plans}

    with progress(None, "export: model files") as counter:
        for family_name, family in FAMILIES.items():
            tasks = [plan.task for plan in plans if plan.family == family_name]
            best: dict[str, list[Row]] = {task: [] for task in tasks}  # by task, in file order
            configurations = _configurations(connection, family, {"snapshot_id": snapshot["snapshot_id"],
                                                                  "tasks": tasks})
            for (task, slug), group in itertools.groupby(configurations, key=itemgetter("task", "slug")):
                plan, group = by_task[task], list(group)
                best_rows = [row for row in group if row["is_best"]]  # one per GPU, in GPU order as the rows
                document = {**plan.header, **_model(group[0]), "gpus": sorted({row["gpu"] for row in group}),
                            "configurations": [plan.configuration(row) for row in group],
                            "best": {row["gpu"]: plan.configuration(row) for row in best_rows}}
                vetted = _write(staging, f"{task}/models/{slug}.json", plan, document, group)
                v2_files[task].write_model_file(slug, document, configurations_vetted=vetted)
                best[task] += best_rows
                written += 1
                counter.update(1)
            for task, rows in best.items():
                plan = by_task[task]
                index_rows = [{**_model(row), **plan.configuration(row)} for row in rows]
                _write(staging, f"{task}/index.json", plan, {**plan.header, "rows": index_rows}, rows)
                v2_files[task].write_index(index_rows)
    return written


@dataclass(frozen=True)
class ExportResult:
    task_count: int
    model_file_count: int


def export(paths: Paths, *, as_of: str | None = None, retrieved: str | None = None) -> ExportResult:
    """Write OUT/index from the database, through a staging folder that replaces it whole."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    staging = paths.build_root / f".index-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with connect(str(paths.database), read_only=True) as connection:
            snapshot = index_snapshot(connection)
            _check_slugs_distinct(connection, snapshot["snapshot_id"])
            # The CLI has checked the dates given; as_of's default is the day of the snapshot's fetch.
            plans = task_plans(connection, snapshot, as_of or snapshot["retrieved"],
                               stated_retrieved(snapshot, retrieved))
            for plan in plans:
                (staging / plan.task / "models").mkdir(parents=True)
            # The tiers before the rest, not beside them: at 1000x the two at once took 3.5 GB.
            _write_tiers(connection, snapshot["snapshot_id"], plans, staging)
            model_file_count = _write_configurations(connection, snapshot, plans, staging)
            index_schema.write_schemas(connection, staging)
        replace_directory(staging, paths.index_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(len(plans), model_file_count)
