"""The one-screen audit summary printed at the end of a refresh, read from the audit_findings view."""

import duckdb

from pipeline.paths import Paths

EXAMPLES_PER_RULE = 2


def audit_summary(paths: Paths) -> str:
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        snapshot_id = connection.execute("select snapshot_id from index_snapshot").fetchone()[0]
        rows = connection.execute(
            """
            select r.rule, r.severity, r.tolerance, count(f.rule) as findings,
                   list(f.row_key || ' = ' || printf('%.3g', f.observed) order by f.row_key)
                       filter (where f.rule is not null)[1:$examples] as examples
            from audit_rules as r
            left join audit_findings as f on f.rule = r.rule and f.snapshot_id = $snapshot_id
            group by r.rule, r.severity, r.tolerance
            order by r.severity desc, findings desc, r.rule
            """,
            {"snapshot_id": snapshot_id, "examples": EXAMPLES_PER_RULE},
        ).fetchall()
    total = sum(row[3] for row in rows)
    lines = [f"audit: {snapshot_id}: {total} finding(s); none blocks the build (details: table audit_findings)"]
    for rule, severity, tolerance, findings, examples in rows:
        lines.append(f"  {severity:<5} {findings:>5}  {rule} (tolerance {tolerance:g})")
        lines.extend(f"               e.g. {example}" for example in examples or [])
    return "\n".join(lines)
