"""energy-index diff: what changed between two snapshots, from the published database's table macros
configuration_diff and index_diff (the same ones the stored change tables are computed with)."""

import json
from typing import Any

import duckdb

from pipeline.database import fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import Paths


def snapshot_diff(paths: Paths, old: str, new: str) -> dict[str, Any]:
    """Configuration and index changes from `old` to `new` (given in either order; compared oldest first)."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        positions = dict(connection.execute("select snapshot_id, position from snapshot_history").fetchall())
        for snapshot_id in (old, new):
            if snapshot_id not in positions:
                raise PipelineError(
                    f"snapshot {snapshot_id} is not in {paths.database}; it holds: {', '.join(sorted(positions))}"
                )
        if old == new:
            raise PipelineError("OLD and NEW are the same snapshot")
        older, newer = sorted((old, new), key=positions.__getitem__)
        pair = {"older": older, "newer": newer}
        configurations = fetch_dicts(
            connection,
            """
            select change, task, model_id, configuration, repeat, field, old_value, new_value, relative_change
            from configuration_diff($older, $newer)
            order by change, field nulls first, task, model_id, configuration, repeat
            """,
            pair,
        )
        index = fetch_dicts(
            connection,
            """
            select change, task, model_id, gpu, old_row_id, new_row_id, old_repeat, new_repeat,
                   unit_label, old_wh_per_unit, new_wh_per_unit, relative_change
            from index_diff($older, $newer)
            order by change, task, model_id, gpu
            """,
            pair,
        )
        tolerance = connection.execute("select change_relative_tolerance from build_parameters").fetchone()[0]
    return {
        "older_snapshot_id": older,
        "newer_snapshot_id": newer,
        "relative_tolerance": tolerance,
        "configuration_changes": configurations,
        "index_changes": index,
    }


def format_json(diff: dict[str, Any]) -> str:
    return json.dumps(diff, indent=2, allow_nan=False)


def format_text(diff: dict[str, Any], limit: int) -> str:
    configurations, index = diff["configuration_changes"], diff["index_changes"]
    lines = [
        f"{diff['older_snapshot_id']} -> {diff['newer_snapshot_id']} "
        f"(floats equal within a relative {diff['relative_tolerance']:g})"
    ]
    added = [c for c in configurations if c["change"] == "added"]
    removed = [c for c in configurations if c["change"] == "removed"]
    changed = [c for c in configurations if c["change"] == "changed"]
    for label, group in (("added", added), ("removed", removed)):
        lines.append(f"configurations {label}: {len(group)}")
        lines.extend(
            f"  {c['task']} {c['model_id']} {c['configuration']} #{c['repeat']}" for c in group[:limit]
        )
        if len(group) > limit:
            lines.append(f"  ... {len(group) - limit} more")
    by_field: dict[str, list[dict[str, Any]]] = {}
    for c in changed:
        by_field.setdefault(c["field"], []).append(c)
    lines.append(f"fields changed: {len(changed)} values in {len(by_field)} fields")
    for field, group in sorted(by_field.items(), key=lambda item: (-len(item[1]), item[0])):
        example = group[0]
        lines.append(
            f"  {field}: {len(group)} configurations, e.g. {example['task']} {example['model_id']} "
            f"{example['configuration']} #{example['repeat']}: {example['old_value']} -> {example['new_value']}"
        )
    lines.append(f"index rows changed: {len(index)}")
    for row in index[:limit]:
        old_figure, new_figure = row["old_wh_per_unit"], row["new_wh_per_unit"]
        figures = (
            f"{old_figure if old_figure is None else round(old_figure, 4)} -> "
            f"{new_figure if new_figure is None else round(new_figure, 4)} Wh per {row['unit_label']}"
        )
        lines.append(
            f"  {row['change']}: {row['task']} {row['model_id']} {row['gpu']}: "
            f"{row['old_row_id']}#{row['old_repeat']} -> {row['new_row_id']}#{row['new_repeat']}, {figures}"
        )
    if len(index) > limit:
        lines.append(f"  ... {len(index) - limit} more (--format json lists every change)")
    return "\n".join(lines)
