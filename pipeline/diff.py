"""energy-index diff: what changed between two snapshots, from the published database's table macros
configuration_diff and index_diff (the same ones the stored change tables are computed with)."""

from collections import Counter
from typing import Any

from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError, command_name, nearest, out_option, shown, snapshot_id_for
from pipeline import jsontext
from pipeline.export import energy_decimals
from pipeline.paths import Paths


def snapshot_diff(paths: Paths, old: str, new: str) -> dict[str, Any]:
    """Configuration and index changes from `old` to `new` (snapshot ids or bare upstream commit hashes),
    compared oldest first (`swapped` says whether the two were given newest first); each index change
    names the upstream commits between the two that moved the row (`moved_by`)."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        held = connection.execute("select snapshot_id, position, commit from snapshot_history").fetchall()
        positions = {snapshot_id: position for snapshot_id, position, _ in held}
        commits = {snapshot_id: commit for snapshot_id, _, commit in held}
        old, new = snapshot_id_for(old, commits), snapshot_id_for(new, commits)
        for snapshot_id in (old, new):
            if snapshot_id not in positions:
                close = nearest(snapshot_id, positions)
                hint = f"did you mean {' or '.join(close)}? " if close else ""
                raise PipelineError(f"snapshot {shown(snapshot_id)} is not in {paths.out / paths.database.name}; {hint}'{command_name()} "
                                    f"snapshots{out_option(paths.out)}' lists the {len(positions)} it holds")
        if old == new:
            raise PipelineError("OLD and NEW are the same snapshot")
        older, newer = sorted((old, new), key=positions.__getitem__)
        pair = {"older": older, "newer": newer}
        configurations = fetch_dicts(connection, """
            select change, task, model_id, configuration, repeat, field, old_value, new_value, relative_change
            from configuration_diff($older, $newer)
            order by change, field nulls first, task, model_id, configuration, repeat""", pair)
        index = fetch_dicts(connection, """
            select change, task, model_id, gpu, old_row_id, new_row_id, old_repeat, new_repeat,
                   unit_label, old_wh_per_unit, new_wh_per_unit, relative_change
            from index_diff($older, $newer)
            order by abs(relative_change) desc nulls last, change, task, model_id, gpu""", pair)
        tolerance = connection.execute("select change_relative_tolerance from build_parameters").fetchone()[0]
        commits, moves = _moves_by_commit(connection, positions[older], positions[newer])
    for row in index:
        row["moved_by"] = moves.get((row["task"], row["model_id"], row["gpu"]), [])
    per_task: dict[str, Counter[str]] = {}
    for row in configurations:
        per_task.setdefault(row["task"], Counter())[row["change"]] += 1
    return {
        "older_snapshot_id": older,
        "newer_snapshot_id": newer,
        "swapped": older != old,
        "relative_tolerance": tolerance,
        "summary": {
            "configurations_by_task": {task: dict(counts) for task, counts in sorted(per_task.items())},
            "index_rows_changed": len(index),
            "index_changes_by_kind": dict(Counter(row["change"] for row in index)),
        },
        "commits": commits,
        "index_changes": index,
        "configuration_changes": configurations,
    }


def _moves_by_commit(connection: Any, older: int, newer: int) -> tuple[
        list[dict[str, Any]], dict[tuple[str, str, str], list[dict[str, Any]]]]:
    """The upstream commits after position `older` up to `newer`, in commit order; and each index row that moved from one snapshot to the next between positions `older` and `newer`: the
    upstream commits that moved it, oldest first (index_diff of each snapshot and its predecessor)."""
    steps = fetch_dicts(connection, """
        select snapshot_id, previous_snapshot_id, commit, commit_subject from snapshot_history
        where position > $older and position <= $newer order by position""", {"older": older, "newer": newer})
    moves: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for step in steps:
        for row in fetch_dicts(connection, "select task, model_id, gpu, change, relative_change "
                               "from index_diff($previous, $snapshot)",
                               {"previous": step["previous_snapshot_id"], "snapshot": step["snapshot_id"]}):
            moves.setdefault((row["task"], row["model_id"], row["gpu"]), []).append({
                "snapshot_id": step["snapshot_id"], "commit": step["commit"],
                "commit_subject": step["commit_subject"], "change": row["change"],
                "relative_change": row["relative_change"]})
    return [{key: step[key] for key in ("snapshot_id", "commit", "commit_subject")} for step in steps], moves


def _short_commit(move: dict[str, Any]) -> str:
    return (move["commit"] or move["snapshot_id"])[:7]


def format_json(diff: dict[str, Any]) -> str:
    return jsontext.dumps(diff).decode()


def _figure(value: float | None, row: dict[str, Any]) -> str:
    """A Wh figure of an index row as the index files round it."""
    return "—" if value is None else f"{value:.{energy_decimals(row['unit_label'])}f}"


def _configuration(row_id: str | None, repeat: int | None) -> str:
    """A row_id less its model slug (the model is shown beside it), and the repeat when there are several."""
    if row_id is None:
        return "—"
    configuration = row_id.split("/", 1)[1]
    return configuration if repeat in (None, 1) else f"{configuration} #{repeat}"


def _value(text: str | None) -> str:
    try:
        return "—" if text is None else f"{float(text):.6g}"
    except ValueError:
        return text


# Where a cut identifier keeps its characters: the share of them taken from its start, tried in this
# order until different identifiers still read differently (the middle first: Qwen/Qwen3…B-Instruct).
HEAD_SHARES = (0.5, 0.0, 1.0, 0.25, 0.75)


def _cut(cell: str, width: int, head_share: float = 1.0) -> str:
    """`cell` in at most `width` characters, the cut marked by …."""
    if len(cell) <= width:
        return cell
    head = round((width - 1) * head_share)
    return cell[:head] + "…" + cell[len(cell) - (width - 1 - head):]


def _cut_apart(values: list[str], width: int, told_apart: bool) -> list[str] | None:
    """`values` cut to `width` at the first of HEAD_SHARES at which different values still read differently
    (in the middle if none does and the column's rows are `told_apart` by the others; else None)."""
    cuts = [[_cut(value, width, share) for value in values] for share in HEAD_SHARES]
    return next((cut for cut in cuts if len(set(cut)) == len(set(values))), cuts[0] if told_apart else None)


def _table(title: str, header: list[str], rows: list[list[str]], width: int, shrinkable: list[int],
           told_apart: tuple[int, ...] = ()) -> list[str]:
    """A titled, indented table that fits `width` where it can: only the `shrinkable` columns (identifiers) are
    cut, widest first, to no fewer than 10 characters (the widest value's if fewer) and never so far that two
    different values read the same, unless the column's rows are `told_apart` by the other columns; figures are
    never cut; no rows, no table."""
    if not rows:
        return []
    columns = [list(column) for column in zip(*rows)]
    widths = [max(map(len, [name, *column])) for name, column in zip(header, columns)]

    def can_shrink(i: int) -> bool:
        return (widths[i] > min(10, max(map(len, columns[i])))
                and _cut_apart(columns[i], widths[i] - 1, i in told_apart) is not None)

    # Two spaces of indentation, two between columns.
    while 2 * len(widths) + sum(widths) > width and (candidates := [i for i in shrinkable if can_shrink(i)]):
        widths[max(candidates, key=widths.__getitem__)] -= 1
    for i in shrinkable:
        columns[i] = _cut_apart(columns[i], widths[i], i in told_apart)
    lines = [[_cut(name, w) for name, w in zip(header, widths)], ["-" * w for w in widths], *zip(*columns)]
    return ["", title] + ["  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in lines]


SHORT_CHANGE = {"best configuration changed": "other config", "figure changed": "figure"}


def format_text(diff: dict[str, Any], limit: int, width: int | None = None) -> str:
    """The diff for a reader: a summary, then details; `width` (a terminal's) cuts identifiers to fit."""
    width = width or 10_000
    configurations, index, summary = diff["configuration_changes"], diff["index_changes"], diff["summary"]
    lines = [f"{diff['older_snapshot_id']} → {diff['newer_snapshot_id']} "
             f"(numbers equal within a relative {diff['relative_tolerance']:g})", "", "Summary"]
    for task, counts in summary["configurations_by_task"].items():
        parts = ", ".join(f"{counts[kind]} {kind}" for kind in ("added", "removed", "changed") if kind in counts)
        lines.append(f"  {task}: configurations {parts}")
    if not summary["configurations_by_task"]:
        lines.append("  no configuration added, removed or changed")
    kinds = ", ".join(f"{count} {kind}" for kind, count in summary["index_changes_by_kind"].items())
    lines.append(f"  index rows changed: {summary['index_rows_changed']}{f' ({kinds})' if kinds else ''}")
    rows = [["—" if r["relative_change"] is None else f"{r['relative_change'] * 100:+.1f} %",
             f"{_figure(r['old_wh_per_unit'], r)} → {_figure(r['new_wh_per_unit'], r)}",
             f"Wh per {r['unit_label']}", SHORT_CHANGE.get(r["change"], r["change"]), r["task"], r["model_id"],
             r["gpu"], f"{_configuration(r['old_row_id'], r['old_repeat'])} → "
             f"{_configuration(r['new_row_id'], r['new_repeat'])}",
             ",".join(_short_commit(move) for move in r["moved_by"]) or "—"] for r in index[:limit]]
    # One row per task, model and GPU: their configurations need not read apart.
    lines += _table(f"Index rows, largest move first ({len(rows)} of {len(index)})",
                    ["move", "figure", "unit", "change", "task", "model", "GPU", "configuration", "moved by"],
                    rows, width, [5, 7, 4], told_apart=(7,))
    moved = Counter(move["snapshot_id"] for r in index for move in r["moved_by"])
    lines += _table("Upstream commits behind these moves, in commit order",
                    ["commit", "snapshot", "rows moved", "subject"],
                    [[_short_commit(c), c["snapshot_id"], str(moved[c["snapshot_id"]]), c["commit_subject"] or "—"]
                     for c in diff["commits"] if moved[c["snapshot_id"]]], width, [3])
    added = [c for c in configurations if c["change"] in ("added", "removed")]
    rows = [[c["change"], c["task"], c["model_id"], _configuration(f"-/{c['configuration']}", c["repeat"])]
            for c in added[:limit]]
    lines += _table(f"Configurations added and removed ({len(rows)} of {len(added)})",
                    ["change", "task", "model", "configuration"], rows, width, [2, 3])
    changed = [c for c in configurations if c["change"] == "changed"]
    by_field, rows = Counter(c["field"] for c in changed), []
    for field, count in by_field.most_common(limit):  # ties in the rows' order, which is by field
        example = next(c for c in changed if c["field"] == field)
        rows.append([field, str(count), example["task"], example["model_id"],
                     _configuration(f"-/{example['configuration']}", example["repeat"]),
                     f"{_value(example['old_value'])} → {_value(example['new_value'])}"])
    lines += _table(f"Fields changed ({len(changed)} values in {len(by_field)} fields; one example each)",
                    ["field", "values", "task", "model", "configuration", "e.g."], rows, width, [3, 4, 2, 0])
    if len(index) > limit or len(added) > limit or len(changed) > limit:
        lines += ["", "--limit N shows more; --format json lists every change"]
    return "\n".join(lines)
