"""make bench-history N=200: what a long history costs.

Writes a chain of N synthetic snapshots (bench/history_chain.py), then measures, each as a real
process: the history build of the first 11 and of the first N-1 snapshots; the weekly refresh that
adds one snapshot to each (the 12th, the N-th); the database's size; and, on the N-snapshot database,
`select count(*)` and `select * ... limit 100` of every table and view, each in a fresh process
(seconds and that process's peak RSS). Prints a table and writes OUT/bench/history.json.

Usage: python bench/history.py [--count N] [--out DIR] [--source DIR]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from history_chain import chain  # noqa: E402

import msgspec  # noqa: E402

from pipeline.settings import DEFAULT_OUT  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = PROJECT.parent / "shared" / "upstream" / "ml-energy-leaderboard" / "2026-02-16-7885788"
CLI = str(Path(sys.executable).with_name("energy-index"))
STEP = re.compile(r"^(fetch|ingest|build|export): .*\(([\d.]+) s\)$", re.MULTILINE)

QUERY = """
import sys, time, duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
started = time.perf_counter()
connection.execute(sys.argv[2]).fetchall()
print(time.perf_counter() - started)
"""


def measured(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB (of this process, from wait4) and the output of one command."""
    with tempfile.TemporaryFile("w+") as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if status != 0:
        raise SystemExit(f"{' '.join(command[:3])} ...: failed\n{text}")
    return seconds, usage.ru_maxrss / 1024, text


def run_query(database: Path, sql: str) -> tuple[float, float]:
    """Seconds of the query alone and the peak RSS (MB) of the process that ran it."""
    process = subprocess.Popen([sys.executable, "-c", QUERY, str(database), sql], stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    output = process.stdout.read()
    if status != 0:
        raise SystemExit(f"{sql}: failed")
    return float(output), usage.ru_maxrss / 1024


def steps(stderr: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for step, seconds in STEP.findall(stderr):
        found[step] = found.get(step, 0.0) + float(seconds)
    return found


def history_and_refresh(folders: list[Path], out: Path) -> dict[str, object]:
    history_seconds, history_rss, history_log = measured(
        [CLI, "history", "--source", *map(str, folders[:-1]), "--out", str(out)])
    refresh_seconds, refresh_rss, refresh_log = measured([CLI, "refresh", "--source", str(folders[-1]), "--out", str(out)])
    database = out / "energy_index.duckdb"
    return {
        "snapshots": len(folders),
        "history_build_s": round(history_seconds, 2),
        "history_peak_rss_mb": round(history_rss),
        "refresh_adding_one_s": round(refresh_seconds, 2),
        "refresh_steps_s": steps(refresh_log),
        "refresh_peak_rss_mb": round(refresh_rss),
        "database_mb": round(database.resolve().stat().st_size / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--out", type=Path, default=PROJECT / DEFAULT_OUT / "bench")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args(argv)
    if args.count < 12:
        raise SystemExit("--count must be at least 12 (the small case is 11 snapshots plus one)")
    work = args.out / "history"
    print(f"writing {args.count} chained snapshots ...", file=sys.stderr, flush=True)
    folders = chain(args.source, work / "chain", args.count)
    results: dict[str, object] = {}
    for label, chosen in (("small", folders[:12]), ("large", folders)):
        out = work / f"out-{label}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        print(f"{label}: history of {len(chosen) - 1}, then a refresh adding one ...", file=sys.stderr, flush=True)
        results[label] = history_and_refresh(chosen, out)
        print(f"  {results[label]}", file=sys.stderr, flush=True)
    database = work / "out-large" / "energy_index.duckdb"
    import duckdb

    with duckdb.connect(str(database), read_only=True) as connection:
        objects = [name for (name,) in connection.execute(
            "select table_name from duckdb_tables() where not internal"
            " union all select view_name from duckdb_views() where not internal order by 1").fetchall()]
    queries = {}
    for name in objects:
        count_s, count_mb = run_query(database, f'select count(*) from "{name}"')
        limit_s, limit_mb = run_query(database, f'select * from "{name}" limit 100')
        queries[name] = {"count_s": round(count_s, 3), "count_peak_mb": round(count_mb),
                         "limit_s": round(limit_s, 3), "limit_peak_mb": round(limit_mb)}
    results["queries_at_large"] = queries
    small, large = results["small"], results["large"]
    results["refresh_ratio_large_over_small"] = round(large["refresh_adding_one_s"] / small["refresh_adding_one_s"], 2)

    print(f"\n{'':34} {'11+1 snapshots':>16} {f'{args.count - 1}+1 snapshots':>16}")
    for key in ("history_build_s", "history_peak_rss_mb", "refresh_adding_one_s", "refresh_peak_rss_mb", "database_mb"):
        print(f"{key:34} {small[key]:>16} {large[key]:>16}")
    print(f"{'refresh steps (s)':34} {msgspec.json.encode(small['refresh_steps_s']).decode():>16}  {msgspec.json.encode(large['refresh_steps_s']).decode()}")
    print(f"refresh at {args.count} / at 12: {results['refresh_ratio_large_over_small']}")
    print(f"\n{'object (at ' + str(args.count) + ' snapshots)':36} {'count s':>8} {'MB':>6} {'limit s':>8} {'MB':>6}")
    for name, figures in queries.items():
        print(f"{name:36} {figures['count_s']:>8} {figures['count_peak_mb']:>6} {figures['limit_s']:>8} {figures['limit_peak_mb']:>6}")
    (args.out / "history.json").write_bytes(msgspec.json.format(msgspec.json.encode(results)) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
