"""make bench: time a full refresh and a no-op refresh beside DuckDB alone reading the same JSON.

Every figure is a whole process (interpreter start included), measured in one run so ratios are fair.
Usage: python -m pipeline.bench [--source DIR] [--runs N] [--out DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.files import write_bytes_atomic
from pipeline.paths import PROJECT_ROOT

DEFAULT_SOURCE = PROJECT_ROOT.parent / "shared" / "upstream" / "ml-energy-leaderboard" / "2026-02-16-7885788"

# DuckDB alone: each task and model file's configurations array to Parquet, nothing else; the same
# JSON the pipeline reads, with DuckDB's own type detection.
DUCKDB_ALONE = """
import glob, sys, duckdb
source, out = sys.argv[1], sys.argv[2]
connection = duckdb.connect()
files = sorted(glob.glob(source + "/tasks/*.json") + glob.glob(source + "/models/*.json"))
for i, path in enumerate(files):
    connection.execute(
        "copy (select unnest(configurations, max_depth := 2) from read_json(?, maximum_object_size := 1073741824))"
        f" to '{out}/t{i}.parquet' (format parquet)", [path])
"""


def _time(command: list[str], **kwargs: object) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="snapshot folder (default: newest shared)")
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement; medians are reported (default: 5)")
    parser.add_argument("--out", type=Path, default=Path("build/bench"), help="where bench.json goes")
    args = parser.parse_args(argv)
    cli = str(Path(sys.executable).with_name("energy-index"))
    work = Path(tempfile.mkdtemp(prefix="energy-index-bench-"))
    try:
        full, noop, alone = [], [], []
        for run in range(args.runs):
            out = work / f"refresh-{run}"
            full.append(_time([cli, "refresh", "--source", str(args.source), "--out", str(out)]))
            make = ["make", "-s", f"SOURCE={args.source}", f"OUT={work / 'make'}"]
            if run == 0:
                _time(make, cwd=PROJECT_ROOT)
            noop.append(_time(make, cwd=PROJECT_ROOT))
            parquet = work / f"alone-{run}"
            parquet.mkdir()
            alone.append(_time([sys.executable, "-c", DUCKDB_ALONE, str(args.source), str(parquet)]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {
        "source": str(args.source),
        "runs": args.runs,
        "cpu_count": os.cpu_count(),
        "median_seconds": {
            "full_refresh": statistics.median(full),
            "noop_refresh_make": statistics.median(noop),
            "duckdb_alone_json_to_parquet": statistics.median(alone),
        },
    }
    medians = results["median_seconds"]
    print(f"{'measurement (median of ' + str(args.runs) + ')':<44}{'seconds':>9}{'x DuckDB alone':>16}")
    for name, seconds in medians.items():
        print(f"{name:<44}{seconds:>9.3f}{seconds / medians['duckdb_alone_json_to_parquet']:>16.2f}")
    write_bytes_atomic(args.out / "bench.json", (json.dumps(results, indent=2) + "\n").encode())
    print(f"written: {args.out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
