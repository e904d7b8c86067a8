"""make bench: time full and no-op refreshes beside DuckDB alone and a pandas baseline, per scale.

Every figure is a whole process (interpreter start included), measured in one run so that ratios are
fair; peak RSS is the process's own (wait4). Scales above 1 are synthetic snapshots (energy-index synth).
Usage: python -m pipeline.bench [--source DIR] [--scales 1,100] [--runs N] [--out DIR]
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

# What a user might write instead: json.load, pandas.json_normalize, to_parquet.
PANDAS_BASELINE = """
import glob, json, sys
import pandas as pd
source, out = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(source + "/tasks/*.json") + glob.glob(source + "/models/*.json"))
for i, path in enumerate(files):
    with open(path) as handle:
        document = json.load(handle)
    frame = pd.json_normalize(document["configurations"])
    frame = frame.drop(columns=[c for c in frame.columns if c.startswith("output_length_distribution")])
    frame.to_parquet(f"{out}/t{i}.parquet")
"""


def _measure(command: list[str], **kwargs: object) -> tuple[float, int]:
    """Wall seconds and peak RSS (MB) of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: {' '.join(command)} failed")
    return elapsed, usage.ru_maxrss // 1024


def _bench_scale(source: Path, runs: int, work: Path) -> dict[str, dict[str, float]]:
    cli = str(Path(sys.executable).with_name("energy-index"))
    samples: dict[str, list[tuple[float, int]]] = {"full_refresh": [], "noop_refresh_make": [],
                                                   "duckdb_alone_json_to_parquet": [], "pandas_baseline": []}
    make = ["make", "-s", f"SOURCE={source}", f"OUT={work / 'make'}"]
    _measure(make, cwd=PROJECT_ROOT)
    for run in range(runs):
        samples["full_refresh"].append(_measure([cli, "refresh", "--source", str(source), "--out", str(work / f"r{run}")]))
        shutil.rmtree(work / f"r{run}")
        samples["noop_refresh_make"].append(_measure(make, cwd=PROJECT_ROOT))
        for name, script in (("duckdb_alone_json_to_parquet", DUCKDB_ALONE), ("pandas_baseline", PANDAS_BASELINE)):
            target = work / f"{name}-{run}"
            target.mkdir()
            samples[name].append(_measure([sys.executable, "-c", script, str(source), str(target)]))
            shutil.rmtree(target)
    return {
        name: {"median_seconds": statistics.median(s for s, _ in values), "peak_rss_mb": max(m for _, m in values)}
        for name, values in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="snapshot folder (default: newest shared)")
    parser.add_argument("--scales", default="1", help="comma-separated scales, e.g. 1,100 (default: 1)")
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement; medians are reported (default: 5)")
    parser.add_argument("--out", type=Path, default=Path("build/bench"), help="where bench.json goes")
    args = parser.parse_args(argv)
    scales = [int(scale) for scale in args.scales.split(",")]
    work = Path(tempfile.mkdtemp(prefix="energy-index-bench-"))
    results: dict[str, object] = {"source": str(args.source), "runs": args.runs, "cpu_count": os.cpu_count(), "scales": {}}
    try:
        for scale in scales:
            source = args.source
            if scale != 1:
                from pipeline.synth import synthesize

                source = work / f"synth-{scale}"
                synthesize(args.source, source, scale)
            measured = _bench_scale(source, args.runs, work / f"scale-{scale}")
            results["scales"][str(scale)] = measured
            floor = measured["duckdb_alone_json_to_parquet"]["median_seconds"]
            print(f"scale {scale}x (median of {args.runs})")
            print(f"  {'measurement':<32}{'seconds':>9}{'x DuckDB alone':>16}{'peak RSS MB':>13}")
            for name, figures in measured.items():
                seconds = figures["median_seconds"]
                print(f"  {name:<32}{seconds:>9.3f}{seconds / floor:>16.2f}{figures['peak_rss_mb']:>13}")
            if scale != 1:
                shutil.rmtree(source)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_bytes_atomic(args.out / "bench.json", (json.dumps(results, indent=2) + "\n").encode())
    print(f"written: {args.out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
