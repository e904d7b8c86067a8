"""Export: format the database's views as the energy index JSON files (a public contract).

Views compute; this module only selects rows, rounds them and lays them out in the seed's shape:
OUT/index/<task>/models/<slug>.json per model, OUT/index/<task>/index.json and tiers.json per task.
"""

import codecs
import datetime
import functools
import itertools
import json
import multiprocessing
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Callable

import duckdb
import orjson

from pipeline.database import connect, fetch_dicts, stream_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import progress
from pipeline.source_card import load_source_card
from schemas import dictionary

DATE_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _export_fields(name: str) -> list[tuple[str, str, int | None]]:
    """(key, view column, decimals) of one kind of exported row, from the field dictionary's [exports]."""
    return [(field["key"], field["column"], field.get("decimals")) for field in dictionary.export_fields(name)]


MODEL_FIELDS = [(key, column) for key, column, _ in _export_fields("model")]
CONFIGURATION_FIELDS = _export_fields("token_configuration")
DIFFUSION_FIELDS = _export_fields("diffusion_configuration")
TIER_FIELDS = _export_fields("tier")
TOKEN_ONLY_TIER_KEYS = {"median_itl_ms", "p90_itl_ms", "p99_itl_ms"}
# Wh per unit keeps the index files' rounding: 2 decimals per million tokens, 4 per image or video.
TIER_WH_DECIMALS = {"token": 2, "diffusion": 4}


def format_tier(row: dict[str, Any], family: str) -> dict[str, Any]:
    """One row of tiers.json: keys in order, values rounded as the index files round them."""
    skipped = {"batch_latency_s"} if family == "token" else TOKEN_ONLY_TIER_KEYS
    formatted = {}
    for key, column, digits in TIER_FIELDS:
        if key in skipped:
            continue
        value = row[column]
        if key == "wh_per_unit":
            digits = TIER_WH_DECIMALS[family]
        if key == "latency_limit":
            value = _number(value)
        formatted[key] = value if digits is None or value is None else round(value, digits)
    return formatted


# Frames and frame rate describe videos only; image files leave them out.
VIDEO_ONLY_KEYS = {"num_frames", "fps"}


@dataclass(frozen=True)
class Family:
    """What differs between the token and the diffusion index files."""

    fields: list[tuple[str, str, int | None]]
    configurations_view: str
    order_by: str

    @property
    def columns(self) -> list[str]:
        return sorted({column for _, column, _ in self.fields})


FAMILIES = {
    "token": Family(CONFIGURATION_FIELDS, "configurations", "c.gpu, c.num_gpus, c.max_num_seqs, c.repeat"),
    "diffusion": Family(
        DIFFUSION_FIELDS,
        "diffusion_configurations_current",
        "c.gpu, c.num_gpus, c.batch_size, c.width, c.height, c.num_frames, c.fps, c.inference_steps, "
        "c.ulysses_degree, c.ring_degree, c.repeat, c.source_ordinal",
    ),
}


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    task_count: int
    model_file_count: int


def configuration_formatter(
    fields: list[tuple[str, str, int | None]] = CONFIGURATION_FIELDS, unit: str | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function from a view row to an exported configuration: keys in order, values rounded."""
    plan = [
        (key.format(unit=unit), column, digits)
        for key, column, digits in fields
        if not (unit == "image" and key in VIDEO_ONLY_KEYS)
    ]

    def formatted(row: dict[str, Any]) -> dict[str, Any]:
        return {key: _rounded(row[column], digits) for key, column, digits in plan}

    return formatted


def _rounded(value: Any, digits: int | None) -> Any:
    """Python's round(): 0 digits gives an integer, as the index files hold it."""
    if digits is None or value is None:
        return value
    return round(value) if digits == 0 else round(value, digits)


def format_configuration(row: dict[str, Any], fields: list[tuple[str, str, int | None]] = CONFIGURATION_FIELDS,
                         unit: str | None = None) -> dict[str, Any]:
    return configuration_formatter(fields, unit)(row)


def format_model(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[column] for key, column in MODEL_FIELDS}


# Where orjson and json.dumps format a float differently: below 1e-4 orjson writes 0.0000…, and in
# exponent form it writes 1e-7 or 1e16 where json.dumps writes 1e-07 or 1e+16. A value in the
# indented layout follows ': ' or a line's indentation.
_FLOAT_FORMATS_DIFFER = re.compile(rb"(?:: |\n *)-?(?:0\.0000|[0-9.]+e)")


def _json_escape(error: UnicodeEncodeError) -> tuple[str, int]:
    """Escape what ASCII cannot hold as json.dumps does, with the standard library's own escaping."""
    return json.encoder.encode_basestring_ascii(error.object[error.start:error.end])[1:-1], error.end


# An encoding error handler: encoding scans at C speed and calls it only for each run beyond ASCII.
codecs.register_error("json_ascii_escape", _json_escape)


def ascii_escaped(data: bytes) -> bytes:
    """orjson's UTF-8 output escaped as json.dumps escapes it (in JSON text anything beyond ASCII, and
    DEL, sits inside strings)."""
    if not data.isascii():
        data = data.decode("utf-8").encode("ascii", errors="json_ascii_escape")
    return data.replace(b"\x7f", b"\\u007f") if b"\x7f" in data else data


def dump_json(document: dict[str, Any], floats_vetted: bool = False) -> bytes:
    """json.dumps(document, indent=2) as ASCII bytes, byte for byte, at orjson's speed.

    orjson writes UTF-8 (escaped afterwards, ascii_escaped) and its own short float forms; a document where those show is formatted by the
    standard library instead, as is one orjson refuses (a lone surrogate, a non-string key).
    `floats_vetted` says the caller knows every float to lie in PLAIN_FLOAT_RANGE or be zero, which
    spares the search. Callers make sure no float is NaN or infinite (orjson writes null).
    """
    try:
        data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    except TypeError:
        return json.dumps(document, indent=2, allow_nan=False).encode("ascii")
    data = ascii_escaped(data)
    if floats_vetted or not _FLOAT_FORMATS_DIFFER.search(data):
        return data
    return json.dumps(document, indent=2, allow_nan=False).encode("ascii")


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _compiled_evidence(card: dict[str, Any], compiled: str, tasks_last_commit_date: str | None) -> str:
    source = card["source"]
    if tasks_last_commit_date is None:
        return source["compiled_evidence_unknown"]
    template = source["compiled_evidence_same" if tasks_last_commit_date == compiled else "compiled_evidence_differ"]
    return template.format(compiled=compiled, tasks_last_commit_date=tasks_last_commit_date)


def _exceeding(card: dict[str, Any], over_limit: int) -> str:
    token = card["token"]
    if over_limit == 0:
        return token["exceeding_none"]
    if over_limit == 1:
        return token["exceeding_one"]
    return token["exceeding_many"].format(count=over_limit)


def _header(
    card: dict[str, Any],
    task: dict[str, Any],
    snapshot: dict[str, Any],
    as_of: str,
    retrieved: str,
    unit: str,
    limit: tuple[str, int | float],
    method: str,
    selection: str,
    used_for: str,
    configurations: str,
) -> dict[str, Any]:
    """The keys every file of one task shares, up to and including 'boundary', in the seed's order."""
    source = card["source"]
    compiled = snapshot["last_updated"]
    limit_key, limit_value = limit
    return {
        "version": card["index"]["format_version"],
        "updated": as_of,
        "data_version": as_of,
        "unit": unit,
        limit_key: limit_value,
        "source": {
            "name": source["name"],
            "publisher": source["publisher"],
            "url": source["url"],
            "data_url": source["data_url"].format(task=task["task"]),
            "version": source["version"].format(released=source["released"], compiled=compiled),
            "released": source["released"],
            "compiled": compiled,
            "compiled_evidence": _compiled_evidence(card, compiled, snapshot["tasks_last_commit_date"]),
            "retrieved": retrieved,
            "licence": source["licence"],
            "licence_evidence": list(source["licence_evidence"]),
            "workload": source["workload"].format(workload_label=task["workload_label"], task=task["task"]),
            "method": method,
            "selection": selection,
            "cite": source["cite"],
            "cite_url": source["cite_url"],
            "used_for": used_for,
            "configurations": configurations.format(count=task["configuration_count"]),
        },
        "caveat": card["index"]["caveat"],
        "boundary": card["index"]["boundary"],
    }


def task_header(
    card: dict[str, Any], task: dict[str, Any], snapshot: dict[str, Any], deadline: float, as_of: str, retrieved: str
) -> dict[str, Any]:
    """The header of a token task's files: per million output tokens, under a median-ITL deadline."""
    token = card["token"]
    default = token["default_itl_deadline_ms"]
    template = token["selection_default_deadline" if deadline == default else "selection_other_deadline"]
    selection = template.format(
        deadline=f"{_number(deadline)}", default_deadline=default,
        exceeding=_exceeding(card, task["over_latency_limit_count"]),
    )
    return _header(
        card, task, snapshot, as_of, retrieved, token["unit"], ("itl_deadline_ms", _number(deadline)),
        token["method"], selection, token["used_for"], card["source"]["configurations"],
    )


def diffusion_task_header(
    card: dict[str, Any], task: dict[str, Any], snapshot: dict[str, Any], as_of: str, retrieved: str
) -> dict[str, Any]:
    """The header of a text-to-image or text-to-video task's files: per image or video, under a batch-latency ceiling."""
    diffusion = card["diffusion"]
    unit = diffusion["units"][task["task"]]
    ceiling = _number(diffusion["default_batch_latency_ceiling_s"][task["task"]])
    selection = diffusion["selection"].format(
        ceiling=ceiling, exceeding=_exceeding(card, task["over_latency_limit_count"])
    )
    return _header(
        card, task, snapshot, as_of, retrieved, diffusion["unit"].format(unit=unit),
        ("batch_latency_ceiling_s", ceiling), diffusion["method"].format(unit=unit), selection, diffusion["used_for"],
        diffusion["configurations"],
    )


def _check_date(name: str, value: str) -> str:
    if not DATE_PATTERN.match(value):
        raise PipelineError(f"{name} must be a date as YYYY-MM-DD, got {value!r}")
    return value


def _check_slugs_distinct(connection: duckdb.DuckDBPyConnection, snapshot_id: str) -> None:
    clashes = fetch_dicts(
        connection,
        """
        select task, slug, list(distinct model_id order by model_id) as model_ids
        from (
            select task, slug, model_id from configuration_history where snapshot_id = $snapshot_id
            union all
            select task, slug, model_id from diffusion_configuration_history where snapshot_id = $snapshot_id
        )
        group by task, slug
        having count(distinct model_id) > 1
        order by task, slug
        """,
        {"snapshot_id": snapshot_id},
    )
    if clashes:
        raise PipelineError(
            "model ids that would share one exported file name (slug)",
            [f"{c['task']}: slug {c['slug']} for {' and '.join(c['model_ids'])}" for c in clashes],
        )


_MODELS_JOIN = "join models as m on m.snapshot_id = c.snapshot_id and m.model_id = c.model_id"
# Floats in this range, and zero, print alike in orjson and json.dumps (see dump_json), and still do
# once rounded (the upper bound leaves room for a value rounding up).
PLAIN_FLOAT_RANGE = (1e-4, 1e14)


def plain_floats_sql(columns: list[str]) -> str:
    """A SQL condition: every one of `columns` is null, zero or within PLAIN_FLOAT_RANGE."""
    low, high = PLAIN_FLOAT_RANGE
    return " and ".join(f"coalesce({c} = 0 or abs({c}) >= {low!r} and abs({c}) < {high!r}, true)" for c in columns) or "true"


@dataclass(frozen=True)
class ExportSelect:
    """The columns an export query selects from a view joined to models, and which of them are floats."""

    columns: list[str]
    floats: list[str]

    @classmethod
    def of(cls, connection: duckdb.DuckDBPyConnection, family: Family, view: str) -> "ExportSelect":
        columns = [f"m.{c}" for _, c in MODEL_FIELDS if c != "slug"] + [f"c.{c}" for c in family.columns]
        relation = connection.sql(f"select {', '.join(columns)} from {view} as c {_MODELS_JOIN} limit 0")
        return cls(columns, [c for c, dtype in zip(columns, relation.dtypes) if str(dtype) == "DOUBLE"])

    def sql(self) -> str:
        """The select list, with plain_floats: true where every float of the row prints alike in orjson."""
        return f"c.task, c.slug, {', '.join(self.columns)}, {plain_floats_sql(self.floats)} as plain_floats"


def _export_query(connection: duckdb.DuckDBPyConnection, family: Family, view: str, order_by: str, where: str) -> str:
    return f"""
        select {ExportSelect.of(connection, family, view).sql()}
        from {view} as c {_MODELS_JOIN}
        where c.snapshot_id = $snapshot_id and {where}
        order by c.task, c.slug, {order_by}
        """


def _export_rows(
    connection: duckdb.DuckDBPyConnection, family: Family, view: str, order_by: str, where: str, parameters: dict[str, Any]
) -> list[dict[str, Any]]:
    return fetch_dicts(connection, _export_query(connection, family, view, order_by, where), parameters)


def _streamed_rows(
    connection: duckdb.DuckDBPyConnection, family: Family, view: str, order_by: str, where: str, parameters: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """_export_rows a batch at a time: at the 1000x scale the rows as dictionaries would take gigabytes."""
    return stream_dicts(connection, _export_query(connection, family, view, order_by, where), parameters)


def _rows_by_task(rows: Iterator[dict[str, Any]], tasks: list[str]) -> Iterator[list[dict[str, Any]]]:
    """The rows of each of `tasks` in turn (none where it has none), from rows in the same task order:
    one task's rows are held at a time."""
    groups = itertools.groupby(rows, key=lambda row: row["task"])
    pending = next(groups, None)
    for task in tasks:
        if pending is not None and pending[0] == task:
            yield list(pending[1])
            pending = next(groups, None)
        else:
            yield []
    if pending is not None:
        raise PipelineError(f"export: rows of task {pending[0]} out of the tasks' order")


def _best_rows(connection: duckdb.DuckDBPyConnection, snapshot_id: str, family: Family, where: str = "true",
               parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Best configurations of one family's tasks, with the model's fields, in file order."""
    return _export_rows(
        connection, family, "best_configurations", "c.gpu",
        f"c.task in (select distinct task from {family.configurations_view}) and {where}",
        {"snapshot_id": snapshot_id, **(parameters or {})},
    )


def _check_finite(connection: duckdb.DuckDBPyConnection, snapshot_id: str) -> None:
    """The index format has no NaN or infinity (orjson would write them as null)."""
    problems = []
    for family in FAMILIES.values():
        view = family.configurations_view
        floats = ExportSelect.of(connection, family, view).floats
        condition = " or ".join(f"not isfinite({column})" for column in floats) or "false"
        count = connection.execute(
            f"select count(*) from {view} as c {_MODELS_JOIN} where c.snapshot_id = $id and ({condition})",
            {"id": snapshot_id},
        ).fetchone()[0]
        if count:
            problems.append(f"{view}: {count} row(s) with a NaN or infinite value")
    if problems:
        raise PipelineError("values the index format cannot hold", problems)


@dataclass(frozen=True)
class TaskPlan:
    """What every file of one task shares: its header, its family and its unit (image, video or none)."""

    task: str
    header: dict[str, Any]
    family: str
    unit: str | None

    @functools.cached_property
    def header_prints_alike(self) -> bool:
        """Whether the header's floats print alike in orjson (checked once, not once per file)."""
        return dump_json(self.header) == json.dumps(self.header, indent=2).encode()


def _model_document(
    plan: TaskPlan, rows: list[dict[str, Any]], best: list[dict[str, Any]], formatted: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    return {
        **plan.header,
        **format_model(rows[0]),
        "gpus": sorted({row["gpu"] for row in rows}),
        "configurations": [formatted(row) for row in rows],
        "best": {row["gpu"]: formatted(row) for row in best},
    }


def write_model_files(
    database: str, snapshot_id: str, plans: list[TaskPlan], staging: str, share: int = 0, shares: int = 1
) -> int:
    """Write one share of the per-model files (the models whose slug hashes to `share`) into staging.

    Runs in a worker process when the export is split; each opens the database read-only itself.
    """
    connection = connect(database, read_only=True)
    # A counter in the main process only (share 0): workers' output would interleave with it.
    counter = progress(None, "export: model files") if share == 0 else progress(0, "")
    try:
        written = 0
        by_task = {plan.task: plan for plan in plans}
        for family_name, family in FAMILIES.items():
            tasks = [plan.task for plan in plans if plan.family == family_name]
            if not tasks:
                continue
            share_filter = "list_contains($tasks, c.task) and hash(c.slug) % $shares = $share"
            parameters = {"snapshot_id": snapshot_id, "tasks": tasks, "share": share, "shares": shares}
            # The best rows first: the configurations stream, and a connection holds one result at a time.
            best = _best_rows(connection, snapshot_id, family, share_filter, parameters)
            rows = _streamed_rows(connection, family, family.configurations_view, family.order_by, share_filter, parameters)
            best_by_file: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for row in best:
                best_by_file.setdefault((row["task"], row["slug"]), []).append(row)
            formatters: dict[str, Callable[..., dict[str, Any]]] = {}
            for (task, slug), group in itertools.groupby(rows, key=lambda row: (row["task"], row["slug"])):
                plan = by_task[task]
                if task not in formatters:
                    formatters[task] = configuration_formatter(family.fields, plan.unit)
                rows_of_file, best_of_file = list(group), best_by_file.get((task, slug), [])
                document = _model_document(plan, rows_of_file, best_of_file, formatters[task])
                floats_vetted = plan.header_prints_alike and all(row["plain_floats"] for row in rows_of_file + best_of_file)
                Path(staging, task, "models", f"{slug}.json").write_bytes(dump_json(document, floats_vetted))
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


def _is_large(connection: duckdb.DuckDBPyConnection, snapshot_id: str) -> bool:
    configurations = sum(
        connection.execute(
            f"select count(*) from {family.configurations_view} where snapshot_id = $id", {"id": snapshot_id}
        ).fetchone()[0]
        for family in FAMILIES.values()
    )
    return configurations >= LARGE_INDEX_CONFIGURATIONS


def _write_task_files(
    connection: duckdb.DuckDBPyConnection, snapshot_id: str, plans: list[TaskPlan], staging: Path, large: bool
) -> None:
    """Every task's index.json (its best rows) and tiers.json (its tier-best rows), streamed in task
    order: one query per family for the best rows, and for the tiers one query, or one per task when
    the index is `large`. One task's rows are held at a time."""
    for family_name, family in FAMILIES.items():
        family_plans = [plan for plan in plans if plan.family == family_name]
        tasks = [plan.task for plan in family_plans]
        best = _streamed_rows(connection, family, "best_configurations", "c.gpu", "list_contains($tasks, c.task)",
                              {"snapshot_id": snapshot_id, "tasks": tasks})
        for plan, rows in zip(family_plans, _rows_by_task(best, tasks)):
            formatted = configuration_formatter(family.fields, plan.unit)
            document = {**plan.header, "rows": [{**format_model(row), **formatted(row)} for row in rows]}
            vetted = plan.header_prints_alike and all(row["plain_floats"] for row in rows)
            (staging / plan.task / "index.json").write_bytes(dump_json(document, vetted))
    tier_view = connection.sql("select * from tiered_best_configurations limit 0")
    tier_columns = {column for _, column, _ in TIER_FIELDS}
    tier_floats = [c for c, t in zip(tier_view.columns, tier_view.dtypes) if c in tier_columns and str(t) == "DOUBLE"]
    for group in [[plan] for plan in plans] if large else [plans]:
        tasks = [plan.task for plan in group]
        tiered = stream_dicts(
            connection,
            f"select *, {plain_floats_sql(tier_floats)} as plain_floats from tiered_best_configurations"
            " where snapshot_id = $id and list_contains($tasks, task)"
            " order by task, slug, gpu, latency_metric, latency_limit",
            {"id": snapshot_id, "tasks": tasks},
        )
        for plan, rows in zip(group, _rows_by_task(tiered, tasks)):
            document = {**plan.header, "rows": [format_tier(row, plan.family) for row in rows]}
            vetted = plan.header_prints_alike and all(row["plain_floats"] for row in rows)
            (staging / plan.task / "tiers.json").write_bytes(dump_json(document, vetted))


def export(
    paths: Paths, *, as_of: str | None = None, retrieved: str | None = None, processes: int | None = None
) -> ExportResult:
    """Write OUT/index from the database. `processes` splits the model files (default: one per core
    for a large index, else one); the files are the same whatever it is."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    card = load_source_card()
    staging = paths.build_root / f".index-{os.getpid()}"
    connection = connect(str(paths.database), read_only=True)
    try:
        parameters = fetch_dicts(
            connection, "select i.snapshot_id, b.itl_deadline_ms from index_snapshot as i cross join build_parameters as b", {}
        )[0]
        snapshot_id, deadline = parameters["snapshot_id"], parameters["itl_deadline_ms"]
        snapshot = {
            name: value.isoformat() if isinstance(value, datetime.date) else value
            for name, value in fetch_dicts(
                connection, "select * from snapshots where snapshot_id = $id", {"id": snapshot_id}
            )[0].items()
        }
        as_of = _check_date("AS_OF", as_of or snapshot["retrieved"])
        retrieved = _check_date("RETRIEVED", retrieved or snapshot["retrieved"])
        _check_slugs_distinct(connection, snapshot_id)
        _check_finite(connection, snapshot_id)
        tasks = fetch_dicts(
            connection,
            """
            select t.task, t.workload_label, s.family, s.configuration_count, s.over_latency_limit_count
            from task_summaries as s
            join tasks as t on t.snapshot_id = s.snapshot_id and t.task = s.task
            where s.snapshot_id = $snapshot_id
            order by t.task
            """,
            {"snapshot_id": snapshot_id},
        )
        plans = []
        for task in tasks:
            if task["family"] == "diffusion":
                header = diffusion_task_header(card, task, snapshot, as_of, retrieved)
                unit = card["diffusion"]["units"][task["task"]]
            else:
                header, unit = task_header(card, task, snapshot, deadline, as_of, retrieved), None
            plans.append(TaskPlan(task["task"], header, task["family"], unit))
        large = _is_large(connection, snapshot_id)
        shares = processes or (max(1, min(len(os.sched_getaffinity(0)), 8)) if large else 1)
        shutil.rmtree(staging, ignore_errors=True)
        for plan in plans:
            (staging / plan.task / "models").mkdir(parents=True)
        # Before the model files, not beside them: at 1000x the two at once took 3.5 GB.
        _write_task_files(connection, snapshot_id, plans, staging, large)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        connection.close()

    try:
        arguments = (str(paths.database), snapshot_id, plans, str(staging))
        if shares == 1:
            model_file_count = write_model_files(*arguments)
        else:
            # The files are independent: each process writes the models whose slug hashes to its share.
            # Spawned, not forked: a forked child would inherit DuckDB's threads mid-flight.
            with ProcessPoolExecutor(shares - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
                others = [pool.submit(write_model_files, *arguments, share, shares) for share in range(1, shares)]
                model_file_count = write_model_files(*arguments, 0, shares)
                model_file_count += sum(future.result() for future in others)
        replace_directory(staging, paths.index_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(paths.index_dir, len(tasks), model_file_count)
