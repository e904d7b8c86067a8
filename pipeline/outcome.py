"""What a publish brought, against the build published before it (whose generation is kept until the next
publish): the audit summary (pipeline/audit.py), the one summary line (the index's snapshot and upstream
commit, how many index rows moved, the largest move) and the audit findings the previous build did not
have, which --quiet still prints and --alert-new-findings turns into exit status NEW_FINDINGS_STATUS."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline.audit import summary_of
from pipeline.database import connect, fetch_dicts
from pipeline.errors import command_name, out_option
from pipeline.export import energy_decimals
from pipeline.paths import Paths
from pipeline.publish import published_generations

# The exit status of a run that published a build with audit findings the previous published build did
# not have, when asked for (--alert-new-findings): distinct from 1 (a failure) and 2 (a usage error).
NEW_FINDINGS_STATUS = 3
# The summary line's width, which the commit's subject is cut to fit (a terminal's, a mail's).
SUMMARY_WIDTH = 100
# The new findings a run lists; the rest are counted, and the query that lists them all is given.
FINDINGS_LISTED = 10

_INDEX_ROWS = """
    select b.task, b.model_id, b.gpu, b.row_id, b.repeat, b.unit_label, b.wh_per_unit
    from best_configurations as b"""
_FINDINGS = """
    select rule, row_key, severity, observed, expected from {source}
    where snapshot_id = (select snapshot_id from index_snapshot) order by severity desc, rule, row_key"""
# The published build's audit_findings, computed once for its audit summary and its new findings (a view
# over every snapshot's rows: 30-50 ms for the newest snapshot alone); every snapshot's after a history.
_FINDINGS_TABLE = "published_findings"
_SNAPSHOT = """
    select s.snapshot_id, s.commit, s.commit_subject, b.change_relative_tolerance
    from snapshot_history as s join index_snapshot using (snapshot_id), build_parameters as b"""


@dataclass(frozen=True)
class Outcome:
    audit: str  # the audit summary (pipeline/audit.py)
    summary: str
    new_findings: list[str]

    def status(self, alert_new_findings: bool) -> int:
        """The exit status: NEW_FINDINGS_STATUS for new findings when asked to alert on them, else 0."""
        return NEW_FINDINGS_STATUS if self.new_findings and alert_new_findings else 0


def _facts(connection: duckdb.DuckDBPyConnection, findings: str = "audit_findings"
           ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The index's snapshot, its index rows and its audit findings, read from `findings`."""
    return (fetch_dicts(connection, _SNAPSHOT, {})[0], fetch_dicts(connection, _INDEX_ROWS, {}),
            fetch_dicts(connection, _FINDINGS.format(source=findings), {}))


def _read(database: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    with connect(str(database), read_only=True) as connection:
        return _facts(connection)


def _moved(before: dict[str, Any], after: dict[str, Any], tolerance: float) -> bool:
    return (before["row_id"], before["repeat"]) != (after["row_id"], after["repeat"]) or abs(
        after["wh_per_unit"] - before["wh_per_unit"]) > tolerance * max(after["wh_per_unit"], before["wh_per_unit"])


def publish_outcome(paths: Paths, what: str, seconds: float, every_snapshot: bool = False) -> Outcome:
    """The published build (OUT/current) against the generation published before it (none: every index row
    and finding is new); `what` opens the summary line ("refresh: published <snapshot>"); the audit summary
    covers `every_snapshot` after a history."""
    generations = published_generations(paths)
    previous = generations[-2] / paths.database.name if len(generations) > 1 else None
    with connect(str(paths.database), read_only=True) as connection:
        index_only = "" if every_snapshot else " where snapshot_id = (select snapshot_id from index_snapshot)"
        connection.execute(f"create temp table {_FINDINGS_TABLE} as select * from audit_findings{index_only}")
        snapshot, rows, findings = _facts(connection, _FINDINGS_TABLE)
        audit = summary_of(connection, paths.out, every_snapshot, _FINDINGS_TABLE)
    old_rows, old_findings, unreadable = [], [], False
    if previous is not None:
        try:
            old_rows, old_findings = _read(previous)[1:]
        except (duckdb.Error, OSError):  # damaged (the publish rebuilt it) or made by code that read otherwise
            previous, unreadable = None, True
    old = {(r["task"], r["model_id"], r["gpu"]): r for r in old_rows}
    moves = []
    for row in rows:
        before = old.get((row["task"], row["model_id"], row["gpu"]))
        if before is None or _moved(before, row, snapshot["change_relative_tolerance"]):
            moves.append((row, before))
    gone = len(old.keys() - {(r["task"], r["model_id"], r["gpu"]) for r in rows})
    commit = f"commit {snapshot['commit'][:7]}" if snapshot["commit"] else "no upstream commit known"
    if unreadable:
        moved = f"{len(rows)} index rows; the previous published database could not be read to compare"
    elif previous is None:
        moved = f"first build, {len(rows)} index rows"
    else:
        moved = f"{len(moves) + gone} index row(s) moved" + (f" ({gone} removed)" if gone else "")
        changed = [(row, before) for row, before in moves if before is not None]
        if changed:
            row, before = max(changed, key=lambda pair: abs(pair[0]["wh_per_unit"] / pair[1]["wh_per_unit"] - 1))
            digits = energy_decimals(row["unit_label"])
            moved += (f", the largest {row['task']} {row['model_id']} on {row['gpu']}: {before['wh_per_unit']:.{digits}f}"
                      f" → {row['wh_per_unit']:.{digits}f} Wh per {row['unit_label']} "
                      f"({(row['wh_per_unit'] / before['wh_per_unit'] - 1) * 100:+.1f} %)")
    index = "" if snapshot["snapshot_id"] in what else f"index {snapshot['snapshot_id']}, "
    opening, ending = f"{what} ({index}{commit}", f"): {moved} ({seconds:.1f} s)"
    # The commit's subject as far as the line keeps within SUMMARY_WIDTH (the figures are never cut).
    room = SUMMARY_WIDTH - len(opening) - len(ending) - 3
    if snapshot["commit_subject"] and room >= 12:
        text = snapshot["commit_subject"]
        opening += f' "{text if len(text) <= room else text[:room - 1] + "…"}"'
    summary = opening + ending
    known = {(f["rule"], f["row_key"]) for f in old_findings}
    new = [f for f in findings if (f["rule"], f["row_key"]) not in known]
    lines = []
    if new:
        since = ("the previous published build did not have" if previous is not None else
                 "not compared: the previous published database could not be read" if unreadable else
                 "in the first published build")
        lines.append(f"audit: {snapshot['snapshot_id']}: {len(new)} finding(s) {since}:")
        listed = 0
        for rule in dict.fromkeys(f["rule"] for f in new):  # by severity, then rule
            found = [f for f in new if f["rule"] == rule]
            lines.append(f"  {found[0]['severity']:<5} {len(found):>5}  {rule}, expected {found[0]['expected']}")
            shown = found[:max(0, FINDINGS_LISTED - listed)]
            lines += [f"    {f['row_key']} = {f['observed']:.3g}" for f in shown]
            listed += len(shown)
        if len(new) > listed:
            lines.append(f"  {len(new) - listed} more not listed: {command_name()} sql{out_option(paths.out)} "
                         f"\"select * from audit_findings where snapshot_id = '{snapshot['snapshot_id']}'\"")
    return Outcome(audit, summary, lines)
