"""make bench: the pipeline against the floor the same machine sets with no pipeline around it.

For each scale (1 = the newest shared snapshot; above 1, a synthetic snapshot written first by
`energy-index synth`, untimed), in one run so that ratios are fair, each measurement `--runs` times,
interleaved, medians reported:

- full_refresh: `energy-index refresh` from the local folder into an empty OUT (fetch, ingest with
  validation, build, export), with each step's seconds as the CLI reports them, and the fitting's
  within the build step (`fitting`; the build step imports scipy with pipeline.fits before it);
- noop_refresh: `make` when nothing changed;
- floor = duckdb_alone + load_parquet + export_writer, each a script beside this one:
  duckdb_alone (floor_duckdb.py) reads the same JSON files into Parquet with an explicit schema
  (built from schemas/), and nothing else;
  load_parquet (floor_load.py) loads the Parquet files the refresh published into tables of a new
  database file, as the build does, and nothing else;
  export_writer (floor_export_writer.py) formats the exported documents with the export's own
  writer (msgspec, json.dumps's bytes) and writes them, one process, no other work; its output is checked byte for byte
  against the pipeline's;
- parse_floor (floor_parse.py): msgspec parsing every file, one process per core: the physical
  reference no reading can beat;
- pandas_baseline (baseline_pandas.py): json.load + pandas.json_normalize + to_parquet;
- fitting (fit_curves.py): the build's fitting step alone, pipeline.fits.fit_curves over the index
  snapshot's curve points read from the refresh's database, as the build fits them (in one process; at
  100x with a worker process per other core); its seconds exclude the interpreter and the read, and
  its import of scipy is reported beside it (`import`). The full refresh of a new snapshot includes it
  (in its build step); a no-op refresh refits nothing;
- before_refresh (with --before CLI): the same refresh by another installation of energy-index, the
  code to compare with, interleaved with full_refresh.

At scale 1 it also times the light commands against the interpreter they run in: `python -c pass`,
`python -c "import duckdb"`, `energy-index --version`, `energy-index sql "select 1"` and
`energy-index estimate` and `energy-index plan` on the no-op build, and their floor: a script that imports click and DuckDB,
opens the database read-only and runs `select 1`, the least any command on click that queries it costs.

Targets: TARGETS below (and PEAK_RSS_MB_AT_1000X), the one place they are stated; `--help` lists them.
Each is a ratio to a reference measured in the same run, printed per scale with both figures and met or
not; between two light commands timed in the same rounds, the median of the rounds' ratios.

Wall seconds include interpreter start. Peak RSS is the process tree's (every descendant's resident
memory summed, sampled every 20 ms). Results: a table on stdout and OUT/bench/bench.json.
Usage: python bench/run.py [--source DIR] [--scales 1,100,1000] [--runs N] [--out DIR] [--light] [--before CLI]
(--light, `make bench-light`: only the light commands and the no-op make, in under a minute.)
"""

import argparse
import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from pipeline.files import write_bytes_atomic
from pipeline.paths import PROJECT_ROOT
from pipeline.settings import DEFAULT_OUT

DEFAULT_SOURCE = PROJECT_ROOT.parent / "shared" / "upstream" / "ml-energy-leaderboard" / "2026-02-16-7885788"
STEPS = ("fetch", "ingest", "build", "export")

BENCH = Path(__file__).resolve().parent


def _script(name: str, *arguments: object) -> list[str]:
    return [sys.executable, str(BENCH / name), *map(str, arguments)]


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
    """Each step's seconds as the refresh prints them, and the fitting's within its build step."""
    seconds = {}
    for step in STEPS:
        match = re.search(rf"^{step}: .*\((?:new, |unchanged, )?([0-9.]+) s\)$", log, re.MULTILINE)
        if match:
            seconds[step] = float(match.group(1))
    match = re.search(r"^fit: .*\(([0-9.]+) s\)$", log, re.MULTILINE)
    if match:
        seconds["fitting"] = float(match.group(1))
    return seconds


def _same_files(one: Path, other: Path) -> bool:
    names = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    return names == sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file()) and all(
        (one / name).read_bytes() == (other / name).read_bytes() for name in names
    )


def _measure_into_folder(script: str, source: Path, target: Path) -> dict[str, float]:
    """One run of a script that writes into a folder of its own, removed afterwards."""
    target.mkdir()
    seconds, rss, _ = _measure(_script(script, source, target))
    shutil.rmtree(target)
    return {"seconds": seconds, "peak_rss_mb": rss}


LIGHT_COMMANDS = {
    "python_pass": [sys.executable, "-c", "pass"],
    "python_import_duckdb": [sys.executable, "-c", "import duckdb"],
    # What any `sql` on click must do before its own work: import click and DuckDB, open the database read-only
    # and run a statement. The sql and estimate targets are read against it too (FLOORS).
    "floor_click_duckdb": [sys.executable, "-c", "import sys, click, duckdb; duckdb.connect(sys.argv[1], "
                                "read_only=True).execute('select 1').fetchall()", "{out}/energy_index.duckdb"],
    "cli_version": ["{cli}", "--version"],
    "cli_sql_select_1": ["{cli}", "sql", "--out", "{out}", "select 1"],
    "cli_estimate": ["{cli}", "estimate", "--out", "{out}", "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                     "--gpu", "H100", "--concurrency", "100"],
    "cli_plan": ["{cli}", "plan", "--out", "{out}", "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                 "--tokens-per-day", "1e9", "--p90-itl-ms", "100"],
}


def _wall_seconds(command: list[str]) -> float:
    """Wall seconds of one short command, waited for rather than polled: _measure's memory sampling wakes
    every 20 ms and walks /proc, which on two cores adds a sizeable share to a command of a few tenths."""
    started = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT)
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"bench: {' '.join(command)} failed:\n{(process.stdout + process.stderr)[-2000:]}")
    return elapsed


def _bench_light(cli: str, out: Path, runs: int, **more: list[str]) -> dict[str, dict[str, float]]:
    """The light commands (and `more`) and their references, interleaved, medians of `runs` (three more
    than asked: each takes a fraction of a second, and the first of each warms the page cache)."""
    commands = {**LIGHT_COMMANDS, **more}
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs + 3):
        for name, command in commands.items():
            samples[name].append(_wall_seconds([part.format(cli=cli, out=out) for part in command]))
    # Each round's seconds are kept (`rounds`): a target between two of them is read round by round (targets).
    return {name: {"seconds": statistics.median(values[3:]), "peak_rss_mb": 0.0, "rounds": values[3:]}
            for name, values in samples.items()}


def _bench_scale(source: Path, runs: int, work: Path, light: bool, before: str | None = None) -> dict[str, Any]:
    cli = str(Path(sys.executable).with_name("energy-index"))
    samples: dict[str, list[dict[str, float]]] = {
        name: [] for name in (
            "full_refresh", "noop_refresh", "duckdb_alone", "load_parquet", "export_writer", "floor", "parse_floor",
            "pandas_baseline", "fitting", *(["before_refresh"] if before else []),
        )
    }
    make = ["make", "-s", f"SOURCE={source}", f"OUT={work / 'make'}"]
    _measure(make, cwd=PROJECT_ROOT)  # the build the no-op runs find
    for run in range(runs):
        out = work / f"refresh-{run}"
        seconds, rss, log = _measure([cli, "refresh", "--source", str(source), "--out", str(out)])
        samples["full_refresh"].append({"seconds": seconds, "peak_rss_mb": rss, **_step_seconds(log)})
        seconds, rss, _ = _measure(make, cwd=PROJECT_ROOT)
        samples["noop_refresh"].append({"seconds": seconds, "peak_rss_mb": rss})

        if before:
            earlier = work / f"before-{run}"
            seconds, rss, log = _measure([before, "refresh", "--source", str(source), "--out", str(earlier)])
            samples["before_refresh"].append({"seconds": seconds, "peak_rss_mb": rss, **_step_seconds(log)})
            shutil.rmtree(earlier)

        samples["duckdb_alone"].append(_measure_into_folder("floor_duckdb.py", source, work / f"duckdb-{run}"))
        database = work / f"load-{run}.duckdb"
        seconds, rss, _ = _measure(_script("floor_load.py", out / "parquet", database))
        samples["load_parquet"].append({"seconds": seconds, "peak_rss_mb": rss})
        database.unlink()

        _, rss, printed = _measure(_script("fit_curves.py", out / "energy_index.duckdb"))
        imported, fitted = (float(value) for value in printed.split()[-2:])
        samples["fitting"].append({"seconds": fitted, "import": imported, "peak_rss_mb": rss})

        written = work / f"writer-{run}"
        _, rss, printed = _measure(_script("floor_export_writer.py", out / "index", written))
        if not _same_files(out / "index", written):
            raise SystemExit("bench: the export writer's files differ from the pipeline's")
        samples["export_writer"].append({"seconds": float(printed.split()[-1]), "peak_rss_mb": rss})
        shutil.rmtree(written)
        shutil.rmtree(out)
        parts = [samples[part][-1] for part in ("duckdb_alone", "load_parquet", "export_writer")]
        samples["floor"].append({"seconds": sum(part["seconds"] for part in parts),
                                 "peak_rss_mb": max(part["peak_rss_mb"] for part in parts)})

        seconds, rss, _ = _measure(_script("floor_parse.py", source))
        samples["parse_floor"].append({"seconds": seconds, "peak_rss_mb": rss})

        samples["pandas_baseline"].append(_measure_into_folder("baseline_pandas.py", source, work / f"pandas-{run}"))
        done = ", ".join(f"{name} {values[-1]['seconds']:.2f} s" for name, values in samples.items())
        print(f"  run {run + 1}/{runs}: {done}", flush=True)
    medians = {
        name: {key: statistics.median(sample[key] for sample in values) for key in values[0]}
        for name, values in samples.items()
    }
    if light:
        # The no-op make timed as its reference is, waited for rather than sampled (its memory from above).
        light_figures = _bench_light(cli, work / "make", runs, noop_refresh=make)
        light_figures["noop_refresh"]["peak_rss_mb"] = medians["noop_refresh"]["peak_rss_mb"]
        medians.update(light_figures)
        _report_floors(medians)
    return medians


def _light_only(source: Path, runs: int, work: Path) -> dict[str, Any]:
    """The light commands and a no-op make on a build of `source` (made first, untimed), and their targets."""
    cli = str(Path(sys.executable).with_name("energy-index"))
    make = ["make", "-s", f"SOURCE={source}", f"OUT={work / 'make'}"]
    _measure(make, cwd=PROJECT_ROOT)
    measured = _bench_light(cli, work / "make", runs, noop_refresh=make)
    print(f"light commands (medians of {runs})")
    for name, figures in measured.items():
        print(f"  {name:<22}{figures['seconds']:>9.3f} s")
    _print_targets(targets(1, measured, light=True))
    _report_floors(measured)
    return {**measured, "targets": targets(1, measured, light=True)}


def _report_floors(measured: dict[str, Any]) -> None:
    """Where a light command's target stands against the least it can cost: the floor's own ratio to the
    target's reference, and what the command adds on top of the floor."""
    for name, floor in FLOORS:
        if {name, floor, "python_import_duckdb"} <= measured.keys():
            seconds = {key: measured[key]["seconds"] for key in (name, floor, "python_import_duckdb")}
            print(f"  floor of {name}: {floor} is {seconds[floor] / seconds['python_import_duckdb']:.2f} x "
                  f"`python -c \"import duckdb\"`; {name} adds {1000 * (seconds[name] - seconds[floor]):.0f} ms to it")


def _report(scale: int, runs: int, measured: dict[str, Any]) -> None:
    floor = measured["floor"]["seconds"]
    print(f"scale {scale}x (medians of {runs})")
    print(f"  {'measurement':<22}{'seconds':>9}{'x floor':>9}{'peak RSS MB':>13}")
    for name, figures in measured.items():
        print(f"  {name:<22}{figures['seconds']:>9.2f}{figures['seconds'] / floor:>9.2f}{figures['peak_rss_mb']:>13.0f}")
    refresh = measured["full_refresh"]
    shares = ", ".join(f"{step} {refresh[step]:.2f} s" for step in STEPS if step in refresh)
    print(f"  refresh steps: {shares}")
    if "fitting" in refresh:
        print(f"  fitting, within the build step: {refresh['fitting']:.2f} s, "
              f"{refresh['fitting'] / refresh.get('build', float('nan')):.0%} of the build step, "
              f"{refresh['fitting'] / refresh['seconds']:.0%} of the full refresh")
    if "fitting" in measured:
        fitting = measured["fitting"]
        print(f"  fitting alone (fit_curves.py on the same points): {fitting['seconds']:.2f} s, and importing it "
              f"(scipy) {fitting['import']:.2f} s")
    print(f"  pandas baseline / full refresh: {measured['pandas_baseline']['seconds'] / refresh['seconds']:.2f}; "
          f"pandas baseline / ingest: {measured['pandas_baseline']['seconds'] / refresh.get('ingest', float('nan')):.2f}")
    _print_targets(targets(scale, measured))


class Target(NamedTuple):
    """A speed target: `measurement` (its `step`'s seconds, or the whole run's) at most `bound` times
    `reference`, measured in the same run, at `scale` (1: only there; above 1: there and above)."""

    scale: int
    measurement: str
    step: str | None
    reference: str
    bound: float
    words: str  # the target as the README states it

    def applies(self, scale: int) -> bool:
        return scale == 1 if self.scale == 1 else scale >= self.scale


# Ratios within one run: this machine's seconds move by 20-40 % within the hour.
TARGETS = (
    Target(1, "cli_version", None, "python_pass", 2.0, "`energy-index --version` ≤ 2 × `python -c pass`"),
    Target(1, "cli_sql_select_1", None, "floor_click_duckdb", 1.3,
           "`energy-index sql \"select 1\"` ≤ 1.3 × the light commands' floor"),
    Target(1, "cli_estimate", None, "floor_click_duckdb", 1.3, "`estimate` ≤ 1.3 × the light commands' floor"),
    Target(1, "cli_plan", None, "floor_click_duckdb", 1.3, "`plan` ≤ 1.3 × the light commands' floor"),
    Target(1, "noop_refresh", None, "python_pass", 5.0, "no-op `make` ≤ 5 × `python -c pass`"),
    Target(1, "full_refresh", None, "floor", 3.0,
           "1× full refresh ≤ 3 × the floor (DuckDB alone + loading its Parquet + the export writer)"),
    Target(100, "full_refresh", None, "floor", 1.5,
           "100× full refresh ≤ 1.5 × the floor (DuckDB alone + loading its Parquet + the export writer)"),
    Target(100, "full_refresh", "export", "export_writer", 4.0, "100× export ≤ 4 × the export writer"),
)
PEAK_RSS_MB_AT_1000X = 3000
# (light command, the floor it cannot go below).
FLOORS = (("cli_sql_select_1", "floor_click_duckdb"), ("cli_estimate", "floor_click_duckdb"),
          ("cli_plan", "floor_click_duckdb"))


def targets(scale: int, measured: dict[str, Any], light: bool = False) -> dict[str, dict[str, Any]]:
    """The targets that apply at this scale (with `light`, only those of the light commands): both figures,
    the ratio, the bound, and whether it was met; None where the reference was not measured in this run."""
    found: dict[str, dict[str, Any]] = {}
    for target in TARGETS:
        if not target.applies(scale) or (light and target.measurement == "full_refresh"):
            continue
        seconds = measured[target.measurement].get(target.step or "seconds", float("inf"))
        reference = measured.get(target.reference, {}).get("seconds")
        ratio = None if reference is None else seconds / reference
        outcome = {"seconds": seconds, "reference": target.reference, "reference_seconds": reference}
        # Two commands timed in the same rounds, one after the other, are compared round by round: the median
        # of the rounds' ratios does not move with the machine's speed between rounds, as a ratio of medians does.
        rounds = [measured.get(name, {}).get("rounds") for name in (target.measurement, target.reference)]
        if target.step is None and rounds[0] and rounds[1] and len(rounds[0]) == len(rounds[1]):
            ratios = sorted(a / b for a, b in zip(*rounds))
            ratio = statistics.median(ratios)
            outcome |= {"round_ratios": ratios}
        found[target.words] = {**outcome, "ratio": ratio, "bound": target.bound,
                               "met": None if ratio is None else ratio <= target.bound}
    if scale >= 1000:
        peak = measured["full_refresh"]["peak_rss_mb"]
        found[f"peak RSS ≤ {PEAK_RSS_MB_AT_1000X} MB"] = {
            "seconds": None, "reference": None, "reference_seconds": None, "ratio": peak / PEAK_RSS_MB_AT_1000X,
            "bound": 1.0, "met": peak <= PEAK_RSS_MB_AT_1000X}
    return found


def _print_targets(found: dict[str, dict[str, Any]]) -> None:
    for words, outcome in found.items():
        if outcome["ratio"] is None:
            hint = " (give --before, BENCH_BEFORE=..., an energy-index of the code to compare with)" \
                if outcome["reference"] == "before_refresh" else ""
            print(f"  target {words}: not measured, {outcome['reference']} was not run{hint}")
            continue
        figures = "" if outcome["seconds"] is None else (
            f"{outcome['seconds']:.3f} s against {outcome['reference']} {outcome['reference_seconds']:.3f} s, ")
        if ratios := outcome.get("round_ratios"):
            figures += f"median of {len(ratios)} rounds' ratios (from {ratios[0]:.2f} to {ratios[-1]:.2f}) "
        print(f"  target {words}: {figures}{outcome['ratio']:.2f} x, {'met' if outcome['met'] else 'NOT met'}")
    met, unmeasured = (sum(outcome["met"] is state for outcome in found.values()) for state in (True, None))
    print(f"  targets met: {met} of {len(found)}" + (f" ({unmeasured} not measured)" if unmeasured else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="targets:\n" + "\n".join(f"  {target.words}" for target in TARGETS)
        + f"\n  1000× peak RSS ≤ {PEAK_RSS_MB_AT_1000X} MB")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="snapshot folder (default: newest shared)")
    parser.add_argument("--scales", default="1,100", help="comma-separated scales, e.g. 1,100,1000 (default: 1,100)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement; medians are reported (default: 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "bench", help="where bench.json goes")
    parser.add_argument("--light", action="store_true", help="only the light commands and a no-op make (scale 1)")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--before", default=None, metavar="CLI",
                        help="an energy-index executable of the code to compare the 1x refresh with (e.g. another "
                             "checkout's .venv/bin/energy-index)")
    args = parser.parse_args(argv)
    # The project's modules as an installed package has them, compiled: in a checkout under
    # PYTHONDONTWRITEBYTECODE every command would otherwise compile them again, which no user pays twice.
    compileall.compile_dir(PROJECT_ROOT / "pipeline", quiet=1)
    compileall.compile_dir(PROJECT_ROOT / "schemas", quiet=1)
    scales = [int(scale) for scale in args.scales.split(",")]
    work = Path(tempfile.mkdtemp(prefix="energy-index-bench-", dir=args.work))
    results: dict[str, Any] = {
        "source": str(args.source), "runs": args.runs, "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"), "scales": {},
    }
    try:
        if args.light:
            results["scales"]["1"] = _light_only(args.source, args.runs, work)
            scales = []
        for scale in scales:
            source = args.source
            if scale != 1:
                from pipeline.synth import synthesize

                source = work / f"synth-{scale}"
                print(f"scale {scale}x: writing the synthetic snapshot ...", flush=True)
                results["scales"][str(scale)] = {"synthetic": synthesize(args.source, source, scale)}
            measured = _bench_scale(source, args.runs, work / f"scale-{scale}", light=scale == 1,
                                    before=args.before if scale == 1 else None)
            results["scales"].setdefault(str(scale), {}).update(measured, targets=targets(scale, measured))
            _report(scale, args.runs, measured)
            if scale != 1:
                shutil.rmtree(source)
        if "100" in results["scales"] and "1000" in results["scales"]:
            growth = results["scales"]["1000"]["full_refresh"]["seconds"] / results["scales"]["100"]["full_refresh"]["seconds"]
            results["full_refresh_growth_100_to_1000"] = growth
            print(f"full refresh, 1000x / 100x: {growth:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_bytes_atomic(args.out / "bench.json", msgspec.json.format(msgspec.json.encode(results)) + b"\n")
    print(f"written: {args.out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
