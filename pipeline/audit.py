"""The audit summary printed after a refresh or a history, read from the audit_findings view: per rule,
what its number measures (with unit and bound, as the audit_expected macro writes it) and the findings;
after a history, every snapshot."""

from pathlib import Path

import duckdb

from pipeline.database import connect
from pipeline.errors import command_name, out_option
from pipeline.paths import Paths

EXAMPLES_PER_RULE = 2


def audit_summary(paths: Paths, every_snapshot: bool = False) -> str:
    with connect(str(paths.database), read_only=True) as connection:
        return summary_of(connection, paths.out, every_snapshot)


def summary_of(connection: duckdb.DuckDBPyConnection, out: Path, every_snapshot: bool = False,
               source: str = "audit_findings") -> str:
    """The summary of the database `connection` opens (OUT `out`), its findings read from `source`: the
    audit_findings view, or a table of its rows (a publish's outcome computes them once for both)."""
    snapshot_id = connection.execute("select snapshot_id from index_snapshot").fetchone()[0]
    rows = connection.execute(f"""
        select r.rule, r.severity, r.measure, audit_expected(r.direction, r.tolerance), count(f.rule) as findings,
               list(f.row_key || ' = ' || printf('%.3g', f.observed) order by f.row_key)
                   filter (where f.rule is not null)[1:$examples] as examples
        from audit_rules as r
        left join {source} as f on f.rule = r.rule and f.snapshot_id = $snapshot_id
        group by all
        order by r.severity desc, findings desc, r.rule""",
        {"snapshot_id": snapshot_id, "examples": EXAMPLES_PER_RULE}).fetchall()
    per_snapshot = connection.execute(f"""
        select s.snapshot_id, count(f.rule) as findings,
               count(f.rule) filter (where f.severity = 'warn') as warnings
        from snapshot_history as s left join {source} as f using (snapshot_id)
        group by s.snapshot_id, s.position order by s.position""").fetchall() if every_snapshot else []
    total = sum(row[4] for row in rows)
    lines = [f"audit: {snapshot_id}: {total} finding(s); none blocks the build"]
    for rule, severity, measure, expected, findings, examples in rows:
        lines.append(f"  {severity:<5} {findings:>5}  {rule}, expected {expected}")
        lines.append(f"               {measure}")
        lines.extend(f"               e.g. {example}" for example in examples or [])
    if per_snapshot:
        lines.append(f"audit: every snapshot in the database ({len(per_snapshot)}): findings (of which warnings)")
        lines.extend(f"  {snapshot:<24} {findings:>5} ({warnings})" for snapshot, findings, warnings in per_snapshot)
    lines += ["  the rows (audit_findings):",
              f"    {command_name()} sql{out_option(out)} "
              f"\"select * from audit_findings where snapshot_id = '{snapshot_id}'\""]
    return "\n".join(lines)
