"""make bench: the pipeline against the floor the same machine sets with no pipeline around it.

For each scale (1 = the newest shared snapshot; above 1, a synthetic snapshot written first by
`energy-index synth`, untimed), in one run so that ratios are fair, each measurement `--runs` times,
interleaved, medians reported:

- full_refresh: `energy-index refresh` from the local folder into an empty OUT (fetch, ingest with
  validation, build, export), with each step's seconds as the CLI reports them;
- noop_refresh: `make` when nothing changed;
- floor = duckdb_alone + export_writer:
  duckdb_alone reads the same JSON files (task files one by one, detail files in one query) into
  Parquet with an explicit schema (built from schemas/), and nothing else;
  export_writer formats the exported documents with orjson (OPT_INDENT_2, plus json.dumps's ASCII
  escaping, which byte-identity needs) and writes them, one process, no other work; its output is
  checked byte for byte against the pipeline's;
- pandas_baseline: json.load + pandas.json_normalize + to_parquet on the same files.

Wall seconds include interpreter start. Peak RSS is the process tree's (every descendant's resident
memory summed, sampled every 20 ms). Results: a table on stdout and OUT/bench/bench.json.
Usage: python -m pipeline.bench [--source DIR] [--scales 1,100,1000] [--runs N] [--out DIR]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.files import write_bytes_atomic
from pipeline.paths import PROJECT_ROOT

DEFAULT_SOURCE = PROJECT_ROOT.parent / "shared" / "upstream" / "ml-energy-leaderboard" / "2026-02-16-7885788"
STEPS = ("fetch", "ingest", "build", "export")

# DuckDB alone: every task and detail file's configurations to Parquet with an explicit schema.
DUCKDB_ALONE = """
import glob, json, sys, duckdb
source, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def struct(fields):
    return "STRUCT(" + ", ".join(f'"{k}" {v}' for k, v in fields.items()) + ")"
connection = duckdb.connect()
connection.execute("set enable_progress_bar = false")
with open(source + "/index.json") as handle:
    index = json.load(handle)
diffusion = set(index["architectures"].get("diffusion", []))
for task in index["tasks"]:
    columns = {"configurations": struct(spec["diffusion" if task in diffusion else "token"]) + "[]"}
    connection.execute(
        f"copy (select unnest(configurations, recursive := true) from read_json(?, columns := {columns!r},"
        f" maximum_object_size := 2147483647)) to '{out}/{task}.parquet' (format parquet)",
        [f"{source}/tasks/{task}.json"])
detail = {**spec["detail"], "configurations": struct(spec["detail_row"]) + "[]"}
files = sorted(glob.glob(source + "/models/*.json"))
if files:
    connection.execute(
        f"copy (select * exclude (configurations), unnest(configurations, recursive := true)"
        f" from read_json(?, columns := {detail!r})) to '{out}/details.parquet' (format parquet)", [files])
"""

# The export's floor: the exported documents, already parsed, formatted and written by the fastest
# byte-identical writer in one process. Prints its own seconds (formatting and writing only).
EXPORT_WRITER = """
import json, os, sys, time
import orjson
import pipeline.export  # registers its "json_ascii_escape" codec error handler: json.dumps's escaping
exported, out = sys.argv[1], sys.argv[2]
names = sorted(os.path.relpath(os.path.join(d, f), exported) for d, _, fs in os.walk(exported) for f in fs)
documents = []
for name in names:
    with open(os.path.join(exported, name), "rb") as handle:
        documents.append(json.loads(handle.read()))
for folder in sorted({os.path.dirname(name) for name in names}):
    os.makedirs(os.path.join(out, folder), exist_ok=True)
started = time.perf_counter()
for name, document in zip(names, documents):
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    if not data.isascii():
        data = data.decode().encode("ascii", "json_ascii_escape")
    with open(os.path.join(out, name), "wb") as handle:
        handle.write(data)
print(time.perf_counter() - started)
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


def _duckdb_spec() -> dict[str, dict[str, str]]:
    """The explicit schema of DUCKDB_ALONE, from schemas/: each upstream column with its type."""
    from pipeline.validate import arrow_schema, json_paths, upstream_columns
    from schemas import TABLES

    duckdb_types = {"int64": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}

    def fields(table: str, extra: dict[str, str]) -> dict[str, str]:
        model = TABLES[table]
        schema, paths = arrow_schema(model), json_paths(model)
        flat: dict[str, str] = {}
        nested: dict[str, dict[str, str]] = {}
        for name in upstream_columns(model):
            duckdb_type = duckdb_types[str(schema.field(name).type)]
            path = paths[name]
            if len(path) == 1:
                flat[path[0]] = duckdb_type
            else:
                nested.setdefault(path[0], {})[path[1]] = duckdb_type
        for root, children in nested.items():
            flat[root] = "STRUCT(" + ", ".join(f'"{k}" {v}' for k, v in children.items()) + ")"
        return {**flat, **extra}

    histogram = {"output_length_distribution": "STRUCT(bins DOUBLE[], counts BIGINT[])"}
    return {
        "token": fields("token_configurations", {}),
        "diffusion": fields("diffusion_configurations", {}),
        "detail": fields("model_details", histogram),
        "detail_row": fields("model_detail_configurations", histogram),
    }


def _tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and all its descendants, MB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / 1e6


def _measure(command: list[str], **kwargs: Any) -> tuple[float, float, str]:
    """Wall seconds, peak process-tree RSS (MB) and stdout+stderr of one command."""
    os.sync()  # start every measurement with the writes of the last one on disk
    with tempfile.TemporaryFile("w+") as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True, **kwargs)
        peak = 0.0
        while process.poll() is None:
            peak = max(peak, _tree_rss_mb(process.pid))
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if process.returncode != 0:
        raise SystemExit(f"bench: {' '.join(command)} failed:\n{text[-2000:]}")
    return elapsed, peak, text


def _step_seconds(log: str) -> dict[str, float]:
    seconds = {}
    for step in STEPS:
        match = re.search(rf"^{step}: .*\((?:new, |unchanged, )?([0-9.]+) s\)$", log, re.MULTILINE)
        if match:
            seconds[step] = float(match.group(1))
    return seconds


def _same_files(one: Path, other: Path) -> bool:
    names = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    return names == sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file()) and all(
        (one / name).read_bytes() == (other / name).read_bytes() for name in names
    )


def _bench_scale(source: Path, runs: int, work: Path) -> dict[str, Any]:
    cli = str(Path(sys.executable).with_name("energy-index"))
    spec = json.dumps(_duckdb_spec())
    samples: dict[str, list[dict[str, float]]] = {
        name: [] for name in ("full_refresh", "noop_refresh", "duckdb_alone", "export_writer", "floor", "pandas_baseline")
    }
    make = ["make", "-s", f"SOURCE={source}", f"OUT={work / 'make'}"]
    _measure(make, cwd=PROJECT_ROOT)  # the build the no-op runs find
    for run in range(runs):
        out = work / f"refresh-{run}"
        seconds, rss, log = _measure([cli, "refresh", "--source", str(source), "--out", str(out)])
        samples["full_refresh"].append({"seconds": seconds, "peak_rss_mb": rss, **_step_seconds(log)})
        seconds, rss, _ = _measure(make, cwd=PROJECT_ROOT)
        samples["noop_refresh"].append({"seconds": seconds, "peak_rss_mb": rss})

        target = work / f"duckdb-{run}"
        target.mkdir()
        seconds, rss, _ = _measure([sys.executable, "-c", DUCKDB_ALONE, str(source), str(target), spec])
        samples["duckdb_alone"].append({"seconds": seconds, "peak_rss_mb": rss})
        shutil.rmtree(target)

        written = work / f"writer-{run}"
        _, rss, printed = _measure([sys.executable, "-c", EXPORT_WRITER, str(out / "index"), str(written)])
        if not _same_files(out / "index", written):
            raise SystemExit("bench: the export writer's files differ from the pipeline's")
        samples["export_writer"].append({"seconds": float(printed.split()[-1]), "peak_rss_mb": rss})
        shutil.rmtree(written)
        shutil.rmtree(out)
        samples["floor"].append({
            "seconds": samples["duckdb_alone"][-1]["seconds"] + samples["export_writer"][-1]["seconds"],
            "peak_rss_mb": max(samples["duckdb_alone"][-1]["peak_rss_mb"], samples["export_writer"][-1]["peak_rss_mb"]),
        })

        target = work / f"pandas-{run}"
        target.mkdir()
        seconds, rss, _ = _measure([sys.executable, "-c", PANDAS_BASELINE, str(source), str(target)])
        samples["pandas_baseline"].append({"seconds": seconds, "peak_rss_mb": rss})
        shutil.rmtree(target)
        done = ", ".join(f"{name} {values[-1]['seconds']:.2f} s" for name, values in samples.items())
        print(f"  run {run + 1}/{runs}: {done}", flush=True)
    return {
        name: {key: statistics.median(sample[key] for sample in values) for key in values[0]}
        for name, values in samples.items()
    }


def _report(scale: int, runs: int, measured: dict[str, Any]) -> None:
    floor = measured["floor"]["seconds"]
    print(f"scale {scale}x (medians of {runs})")
    print(f"  {'measurement':<18}{'seconds':>9}{'x floor':>9}{'peak RSS MB':>13}")
    for name, figures in measured.items():
        print(f"  {name:<18}{figures['seconds']:>9.2f}{figures['seconds'] / floor:>9.2f}{figures['peak_rss_mb']:>13.0f}")
    refresh = measured["full_refresh"]
    shares = ", ".join(f"{step} {refresh[step]:.2f} s" for step in STEPS if step in refresh)
    print(f"  refresh steps: {shares}")
    print(f"  pandas baseline / full refresh: {measured['pandas_baseline']['seconds'] / refresh['seconds']:.2f}; "
          f"pandas baseline / ingest: {measured['pandas_baseline']['seconds'] / refresh.get('ingest', float('nan')):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="snapshot folder (default: newest shared)")
    parser.add_argument("--scales", default="1,100", help="comma-separated scales, e.g. 1,100,1000 (default: 1,100)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement; medians are reported (default: 3)")
    parser.add_argument("--out", type=Path, default=Path("build/bench"), help="where bench.json goes")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    scales = [int(scale) for scale in args.scales.split(",")]
    work = Path(tempfile.mkdtemp(prefix="energy-index-bench-", dir=args.work))
    results: dict[str, Any] = {
        "source": str(args.source), "runs": args.runs, "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"), "scales": {},
    }
    try:
        for scale in scales:
            source = args.source
            if scale != 1:
                from pipeline.synth import synthesize

                source = work / f"synth-{scale}"
                print(f"scale {scale}x: writing the synthetic snapshot ...", flush=True)
                results["scales"][str(scale)] = {"synthetic": synthesize(args.source, source, scale)}
            measured = _bench_scale(source, args.runs, work / f"scale-{scale}")
            results["scales"].setdefault(str(scale), {}).update(measured)
            _report(scale, args.runs, measured)
            if scale != 1:
                shutil.rmtree(source)
        if "100" in results["scales"] and "1000" in results["scales"]:
            growth = results["scales"]["1000"]["full_refresh"]["seconds"] / results["scales"]["100"]["full_refresh"]["seconds"]
            results["full_refresh_growth_100_to_1000"] = growth
            print(f"full refresh, 1000x / 100x: {growth:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_bytes_atomic(args.out / "bench.json", (json.dumps(results, indent=2) + "\n").encode())
    print(f"written: {args.out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
