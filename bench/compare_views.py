"""Compare every view of two built databases row for row: a change to sql/ that must not change what
the views hold (e.g. a rewrite for another engine) is checked by building before and after and running

    python bench/compare_views.py BEFORE.duckdb AFTER.duckdb

Each view's columns (names and types, in order) and rows (as multisets) must be the same: values
exactly equal, or, where they are not, doubles within FLOAT_TOLERANCE relative (DuckDB's parallel
aggregates, e.g. regr_slope, sum in no fixed order: two builds of the same code differ by ~1e-15).
Exit 1 and a line per difference otherwise."""

import argparse
import math
import sys
from pathlib import Path

import duckdb


FLOAT_TOLERANCE = 1e-12


def _rows_within_tolerance(connection: duckdb.DuckDBPyConnection, view: str, types: list[str]) -> bool:
    """Both sides' rows, sorted on their other columns and their doubles rounded, pair off with every
    double within FLOAT_TOLERANCE."""
    doubles = [i for i, data_type in enumerate(types) if data_type == "DOUBLE"]

    def key(row: tuple) -> tuple:
        others = tuple((value is None, str(value)) for i, value in enumerate(row) if i not in doubles)
        return others + tuple((row[i] is None, float(f"{row[i]:.9g}") if row[i] is not None else 0.0) for i in doubles)

    sides = [sorted(connection.execute(f"select * from {database}.{view}").fetchall(), key=key)
             for database in ("before", "after")]
    return len(sides[0]) == len(sides[1]) and all(
        all(a == b or (i in doubles and a is not None and b is not None
                       and math.isclose(a, b, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE * 1e-3))
            for i, (a, b) in enumerate(zip(old, new)))
        for old, new in zip(*sides)
    )


def compare(before: Path, after: Path) -> list[str]:
    connection = duckdb.connect()
    connection.execute("set threads = 1")  # one summation order for the aggregates of both sides
    connection.execute(f"attach '{before}' as before (read_only)")
    connection.execute(f"attach '{after}' as after (read_only)")
    views = {
        database: [row[0] for row in connection.execute(
            "select view_name from duckdb_views() where database_name = ? and not internal order by 1", [database]
        ).fetchall()]
        for database in ("before", "after")
    }
    problems = []
    if views["before"] != views["after"]:
        problems.append(f"views differ: before {views['before']}, after {views['after']}")
    for view in sorted(set(views["before"]) & set(views["after"])):
        columns = {
            database: connection.execute(
                "select column_name, data_type from duckdb_columns() where database_name = ? and table_name = ?"
                " order by column_index", [database, view]
            ).fetchall()
            for database in ("before", "after")
        }
        if columns["before"] != columns["after"]:
            problems.append(f"{view}: columns differ: before {columns['before']}, after {columns['after']}")
            continue
        count = connection.execute(f"select count(*) from before.{view}").fetchone()[0]
        only_before, only_after = (
            connection.execute(
                f"select count(*) from (select * from {a}.{view} except all select * from {b}.{view})"
            ).fetchone()[0]
            for a, b in (("before", "after"), ("after", "before"))
        )
        if only_before == only_after == 0:
            state = "identical"
        elif _rows_within_tolerance(connection, view, [column[1] for column in columns["before"]]):
            state = f"equal, doubles within {FLOAT_TOLERANCE:g} relative ({only_before} rows not bit-identical)"
        else:
            state = "DIFFERENT"
        print(f"{view}: {count} rows, {len(columns['before'])} columns, {state}")
        if state == "DIFFERENT":
            problems.append(f"{view}: {only_before} row(s) only before, {only_after} only after")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    problems = compare(args.before, args.after)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
