"""Export: format the database's views as the energy index JSON files (a public contract).

Views compute; this module only selects rows, rounds them and lays them out in the seed's shape:
OUT/index/<task>/models/<slug>.json per model and OUT/index/<task>/index.json per task.
"""

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import fetch_dicts
from pipeline.errors import PipelineError
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.source_card import load_source_card

DATE_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# Exported configuration keys in the seed's order: (key, column of the configurations view, rounding).
# Rounding: None keeps the value, 0 rounds to an integer, n > 0 rounds to n decimals (Python's round()).
CONFIGURATION_FIELDS: list[tuple[str, str, int | None]] = [
    ("gpu", "gpu", None),
    ("num_gpus", "num_gpus", None),
    ("tensor_parallel", "tensor_parallel", None),
    ("data_parallel", "data_parallel", None),
    ("expert_parallel", "expert_parallel", None),
    ("precision", "precision", None),
    ("max_num_seqs", "max_num_seqs", None),
    ("avg_requests_in_flight", "avg_batch_size", 1),
    ("wh_per_million_output_tokens", "wh_per_million_output_tokens", 2),
    ("joules_per_output_token", "joules_per_output_token", 7),
    ("median_itl_ms", "median_itl_ms", 1),
    ("p90_itl_ms", "p90_itl_ms", 1),
    ("p99_itl_ms", "p99_itl_ms", 1),
    ("tokens_per_second", "tokens_per_second", 1),
    ("gpu_power_watts_total", "gpu_power_watts_total", 0),
    ("avg_output_tokens", "avg_output_tokens", 0),
    ("under_itl_deadline", "under_itl_deadline", None),
    ("avg_running_batch", "avg_batch_size", 1),
    ("p95_itl_ms", "p95_itl_ms", 1),
    ("row_id", "row_id", None),
    ("repeat", "repeat", None),
]
# Exported model keys: (key, column of the models table).
MODEL_FIELDS: list[tuple[str, str]] = [
    ("slug", "slug"),
    ("name", "nickname"),
    ("model_id", "model_id"),
    ("params_b", "total_params_billions"),
    ("active_params_b", "activated_params_billions"),
    ("architecture", "architecture"),
]
# Diffusion configuration keys in export order; {unit} is image or video. Wh per image is small
# (0.09 Wh for SANA at 1024 px), so it keeps 4 decimals.
DIFFUSION_FIELDS: list[tuple[str, str, int | None]] = [
    ("gpu", "gpu", None),
    ("num_gpus", "num_gpus", None),
    ("ulysses_degree", "ulysses_degree", None),
    ("ring_degree", "ring_degree", None),
    ("precision", "precision", None),
    ("batch_size", "batch_size", None),
    ("width", "width", None),
    ("height", "height", None),
    ("num_frames", "num_frames", None),
    ("fps", "fps", None),
    ("inference_steps", "inference_steps", None),
    ("wh_per_{unit}", "wh_per_output", 4),
    ("joules_per_{unit}", "joules_per_output", 1),
    ("batch_latency_s", "batch_latency_s", 2),
    ("{unit}s_per_second", "outputs_per_second", 4),
    ("gpu_power_watts_total", "gpu_power_watts_total", 0),
    ("under_latency_ceiling", "under_latency_ceiling", None),
    ("row_id", "row_id", None),
    ("repeat", "repeat", None),
]
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


def _rounded(value: Any, digits: int | None) -> Any:
    if digits is None or value is None:
        return value
    return round(value) if digits == 0 else round(value, digits)


def format_configuration(row: dict[str, Any], fields: list[tuple[str, str, int | None]] = CONFIGURATION_FIELDS,
                         unit: str | None = None) -> dict[str, Any]:
    formatted = {}
    for key, column, digits in fields:
        if unit == "image" and key in VIDEO_ONLY_KEYS:
            continue
        formatted[key.format(unit=unit)] = _rounded(row[column], digits)
    return formatted


def format_model(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[column] for key, column in MODEL_FIELDS}


def _dump(document: dict[str, Any]) -> bytes:
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
            "configurations": source["configurations"].format(count=task["configuration_count"]),
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
        token["method"], selection, token["used_for"],
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
        from configurations
        where snapshot_id = $snapshot_id
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


def _familyfetch_dicts(
    connection: duckdb.DuckDBPyConnection, snapshot_id: str, family: Family
) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Per task of one family: its configurations and its best configurations, each with the model's fields."""
    model_columns = ", ".join(f"m.{column}" for _, column in MODEL_FIELDS if column != "slug")
    selected = ", ".join(f"c.{column}" for column in family.columns)
    join = "join models as m on m.snapshot_id = c.snapshot_id and m.model_id = c.model_id"
    key = {"snapshot_id": snapshot_id}
    configurations = fetch_dicts(
        connection,
        f"""
        select c.task, c.slug, {model_columns}, {selected}
        from {family.configurations_view} as c {join}
        where c.snapshot_id = $snapshot_id
        order by c.task, c.slug, {family.order_by}
        """,
        key,
    )
    best = fetch_dicts(
        connection,
        f"""
        select c.task, c.slug, {model_columns}, {selected}
        from best_configurations as c {join}
        where c.snapshot_id = $snapshot_id and c.task in (select distinct task from {family.configurations_view})
        order by c.task, c.slug, c.gpu
        """,
        key,
    )
    by_task: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for row in configurations:
        by_task.setdefault(row["task"], ([], []))[0].append(row)
    for row in best:
        by_task.setdefault(row["task"], ([], []))[1].append(row)
    return by_task


def _task_documents(
    header: dict[str, Any],
    configurations: list[dict[str, Any]],
    best: list[dict[str, Any]],
    family: Family,
    unit: str | None,
) -> tuple[dict[str, bytes], bytes]:
    by_slug: dict[str, list[dict[str, Any]]] = {}
    for row in configurations:
        by_slug.setdefault(row["slug"], []).append(row)
    best_by_slug: dict[str, list[dict[str, Any]]] = {}
    for row in best:
        best_by_slug.setdefault(row["slug"], []).append(row)

    def configuration(row: dict[str, Any]) -> dict[str, Any]:
        return format_configuration(row, family.fields, unit)

    model_files = {}
    for slug, rows in by_slug.items():
        document = {
            **header,
            **format_model(rows[0]),
            "gpus": sorted({row["gpu"] for row in rows}),
            "configurations": [configuration(row) for row in rows],
            "best": {row["gpu"]: configuration(row) for row in best_by_slug.get(slug, [])},
        }
        model_files[slug] = _dump(document)
    task_index = {**header, "rows": [{**format_model(row), **configuration(row)} for row in best]}
    return model_files, _dump(task_index)


def export(paths: Paths, *, as_of: str | None = None, retrieved: str | None = None) -> ExportResult:
    if not paths.database.is_file():
        raise PipelineError(f"{paths.database}: missing; run 'energy-index build' first")
    card = load_source_card()
    connection = duckdb.connect(str(paths.database), read_only=True)
    try:
        parameters = fetch_dicts(
            connection, "select i.snapshot_id, b.itl_deadline_ms from index_snapshot as i cross join build_parameters as b", {}
        )[0]
        snapshot_id, deadline = parameters["snapshot_id"], parameters["itl_deadline_ms"]
        snapshot = fetch_dicts(connection, "select * from snapshots where snapshot_id = $id", {"id": snapshot_id})[0]
        as_of = _check_date("AS_OF", as_of or snapshot["retrieved"])
        retrieved = _check_date("RETRIEVED", retrieved or snapshot["retrieved"])
        _check_slugs_distinct(connection, snapshot_id)
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
        staging = paths.build_root / f".index-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        model_file_count = 0
        try:
            rows_by_family = {name: _familyfetch_dicts(connection, snapshot_id, family) for name, family in FAMILIES.items()}
            for task in tasks:
                if task["family"] == "diffusion":
                    header = diffusion_task_header(card, task, snapshot, as_of, retrieved)
                    unit = card["diffusion"]["units"][task["task"]]
                else:
                    header, unit = task_header(card, task, snapshot, deadline, as_of, retrieved), None
                configurations, best = rows_by_family[task["family"]].get(task["task"], ([], []))
                model_files, task_index = _task_documents(
                    header, configurations, best, FAMILIES[task["family"]], unit
                )
                models_dir = staging / task["task"] / "models"
                models_dir.mkdir(parents=True)
                for slug, data in model_files.items():
                    (models_dir / f"{slug}.json").write_bytes(data)
                (staging / task["task"] / "index.json").write_bytes(task_index)
                model_file_count += len(model_files)
            replace_directory(staging, paths.index_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        connection.close()
    return ExportResult(paths.index_dir, len(tasks), model_file_count)
