"""Every default a user can change, each declared once with what it is for (datasette's SETTINGS habit):
the CLI's options, `make help` (python -m pipeline.settings) and docs/cli.md read them from here.
Imports nothing heavy, so that building the command line costs little more than Python's start."""

import datetime
import functools
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.paths import LATENCY_TIERS as TIERS_FILE
from pipeline.paths import SOURCE_CARD


@dataclass(frozen=True)
class Setting:
    """An option (--name) or an environment variable (NAME), its default, what it is for, and the make
    variable that passes it. A default another file declares (the ITL deadline: the source card) is given as
    `read_default`, the function that reads it there, and read when first asked for: only the commands that
    use it read that file."""

    name: str
    given_default: Any
    help: str
    make: str = ""
    read_default: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if self.read_default is not None and self.given_default is not None:
            raise ValueError(f"{self.name}: a default is given or read where it is declared, not both")

    # (cached_property stores into the instance's __dict__, past the frozen dataclass's __setattr__: the
    # class must keep its __dict__, no slots=True.)
    @functools.cached_property
    def default(self) -> Any:
        """The default: as given, or as read_default reads it (once)."""
        return self.given_default if self.read_default is None else self.read_default()

    def value(self) -> str:  # an environment variable's value, or its default
        return (os.environ.get(self.name) or self.default).rstrip("/")


# With no source given, the pipeline follows the upstream: the newest commit of UPSTREAM_REPOSITORY that
# touched UPSTREAM_PATH, asked of GitHub's REST API, its files read from GitHub's raw-file host at that
# commit. Both hosts are settings so that a mirror, a proxy or a test server can stand in.
UPSTREAM_REPOSITORY = "ml-energy/leaderboard"
UPSTREAM_PATH = "public/data"
GITHUB_API = Setting("ENERGY_INDEX_GITHUB_API", "https://api.github.com", "GitHub's REST API")
GITHUB_RAW = Setting("ENERGY_INDEX_GITHUB_RAW", "https://raw.githubusercontent.com", "GitHub's raw-file host")
# A fresh build starts from a copy of the database's catalogue (its tables empty, its views, macros and
# descriptions), which depends on this code alone: made once per version of the code and kept here.
CATALOG_CACHE = Setting(
    "ENERGY_INDEX_CACHE", None, "folder where a fresh build keeps the empty database it starts from, one per "
    "version of the code; 'off' keeps none (default: $XDG_CACHE_HOME/energy-index, else ~/.cache/energy-index)")
# Sent to the API host only, never to the raw-file host: it raises the API's limit of 60 requests an hour.
GITHUB_TOKEN_VARIABLE = "GITHUB_TOKEN"
# A commit as --commit (make COMMIT=) takes it: 7 to 40 hex digits, as git abbreviates.
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{7,40}$")


def time_problem(text: str) -> str | None:
    """What keeps `text` from being a commit time, an ISO 8601 time (a date, T, a time of day) with its
    zone; None when nothing does. Without a zone the instant is unknown, and the snapshots table's
    timestamp with time zone could not hold it."""
    try:
        moment = datetime.datetime.fromisoformat(text) if re.match(r"^\d{4}-\d{2}-\d{2}T", text) else None
    except ValueError:
        moment = None
    if moment is None:
        return "is not an ISO 8601 time, e.g. 2026-02-16T09:48:29Z"
    if moment.tzinfo is None:
        return "has no time zone; add Z (UTC) or the offset, e.g. 2026-02-16T09:48:29Z or 2026-02-16T04:48:29-05:00"
    return None


def is_url(source: str) -> bool:
    """Whether a SOURCE (as given, or as a manifest records it) is a URL rather than a local folder."""
    return "://" in source


OUT = Setting("--out", Path("build"), "folder for every output: raw/, parquet/, energy_index.duckdb, index/", "OUT")
SOURCE = Setting(
    "--source", None, "a local directory with the upstream public/data layout (index.json, tasks/, models/), or an "
    f"http(s):// URL of one (default: follow the upstream: the newest commit of {UPSTREAM_REPOSITORY} that changed "
    f"{UPSTREAM_PATH}, asked of ${GITHUB_API.name}, files from ${GITHUB_RAW.name}; {GITHUB_TOKEN_VARIABLE} is sent "
    "to the API when set)", "SOURCE")


COMMIT = Setting("--commit", None, "fetch the upstream at this commit (7 to 40 hex digits) instead of its newest; "
                 "a commit already in OUT/raw needs no network", "COMMIT")
COMMIT_TIME = Setting(
    "--commit-time", None, "the upstream commit time of a source that has no snapshot.json (ISO 8601, e.g. "
    "2026-02-16T09:48:29Z): it places the snapshot in the history; without it, a folder without snapshot.json is "
    "ordered by the day it was first fetched", "COMMIT_TIME")


def source_card_itl_deadline_ms() -> float:
    """The leaderboard web app's own default ITL deadline, as the source card states it (the export's wording
    reads it there too); read with tomllib, not the typed pipeline.source_card, whose msgspec would cost ~20 ms."""
    import tomllib

    return float(tomllib.loads(SOURCE_CARD.read_text("utf-8"))["token"]["default_itl_deadline_ms"])


ITL_DEADLINE_MS = Setting(
    "--itl-deadline-ms", None, "median inter-token latency ceiling for the best configurations (the leaderboard's "
    "own)", "ITL_DEADLINE_MS", read_default=source_card_itl_deadline_ms)
LATENCY_TIERS = Setting("--latency-tiers", TIERS_FILE, "the latency tiers of tiered_best_configurations and "
                        "tiers.json, in the layout of pipeline/latency_tiers.toml")
AS_OF = Setting("--as-of", None, "the index's 'updated' and 'data_version' date (default: the date the fetch first "
                "retrieved the snapshot, so that a rerun on unchanged input writes identical files)", "AS_OF")
RETRIEVED = Setting("--retrieved", None, "the index snapshot's retrieval date, the index files' 'source.retrieved' "
                    "and the database's (data_version, index_history) alike (default: the date the fetch first "
                    "retrieved the snapshot)", "RETRIEVED")
# The most a limit may be set to; a larger value is a mistake said before any work (exit 2), never a silent
# "no limit" (and there is no way to ask for none: a run left unattended has a bound). A time limit longer
# than a day outlives the nightly run it bounds (cron starts the next before it ends); a size beyond 1 EiB
# is more than an address space holds.
LONGEST_LIMIT_S = 86_400
LARGEST_SIZE = 1 << 60
# Wall-clock deadlines for a URL: one per file and one for the whole fetch; a server that trickles bytes
# extends neither.
TIMEOUT = Setting("--timeout", 30.0, "give up on a file of a URL that has not fully arrived after this many "
                  f"seconds (at most {LONGEST_LIMIT_S})")
FETCH_DEADLINE = Setting("--fetch-deadline", 900.0, "give up on a URL fetch that has not finished after this many "
                         f"seconds (at most {LONGEST_LIMIT_S})")
# The largest upstream file today is 0.4 MB, and 406 MB at the benchmark's 1000x scale; 1 GiB leaves room for
# that and still stops an endless body.
MAX_FILE_BYTES = Setting("--max-file-bytes", 1024 ** 3, f"refuse any upstream file larger than this many bytes "
                         f"(at most {LARGEST_SIZE}, 1 EiB)")
# energy-index sql: the bounds a query runs within (a heavy query must not hold the machine: DuckDB's own
# default memory limit is 80 % of it).
SQL_TIMEOUT = Setting("--timeout", 60.0, f"stop the query after this many seconds (at most {LONGEST_LIMIT_S})")
SQL_MEMORY_LIMIT = Setting("--memory-limit", "4GB", "the most memory the query may use beyond the program's own, "
                           "the most it may spill to a temporary folder outside OUT, and the largest result (16MB to 1EiB)")
# Sizes as DuckDB reads them: KB, MB, GB, TB in powers of 1000, KiB, MiB, GiB, TiB in powers of 1024.
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|[KMGT]i?B)", re.IGNORECASE)
SIZE_UNITS = {"B": 1, **{f"{p}B": 1000 ** (i + 1) for i, p in enumerate("KMGT")},
              **{f"{p}IB": 1024 ** (i + 1) for i, p in enumerate("KMGT")}}
# The bounds a --memory-limit may take: less than DuckDB needs to answer any query, or more than an address
# space holds (LARGEST_SIZE), is a mistake said before any work.
SQL_MEMORY_RANGE = (16 * 1000 ** 2, LARGEST_SIZE)
# energy-index plan: the largest demand it reads, a usage error beyond (exit 2): past it the replica count
# of the slowest configuration measured (0.0006 videos a second) could overflow its integer, long past any
# fleet. A request a second counts at up to LONGEST_OUTPUT_TOKENS output tokens against it.
MOST_OUTPUTS_PER_DAY = 1e18
LONGEST_OUTPUT_TOKENS = 1e5
MOST_REQUESTS_PER_SECOND = MOST_OUTPUTS_PER_DAY / 86_400 / LONGEST_OUTPUT_TOKENS


def size_bytes(text: str) -> int | None:
    """The byte count of a size written like 500MB or 8GiB; None when it is not one."""
    if (match := SIZE.fullmatch(text.strip())) is None:
        return None
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).upper()])


def catalog_cache_dir() -> Path | None:
    """CATALOG_CACHE's folder; None when it is 'off' or there is no home to default to."""
    chosen = os.environ.get(CATALOG_CACHE.name, "")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    if base := os.environ.get("XDG_CACHE_HOME"):
        return Path(base) / "energy-index"
    try:
        return Path.home() / ".cache" / "energy-index"
    except RuntimeError:  # no HOME and no user entry, as under some service managers
        return None


SETTINGS = (OUT, SOURCE, COMMIT, COMMIT_TIME, ITL_DEADLINE_MS, LATENCY_TIERS, AS_OF, RETRIEVED, TIMEOUT,
            FETCH_DEADLINE, MAX_FILE_BYTES, SQL_TIMEOUT, SQL_MEMORY_LIMIT, GITHUB_API, GITHUB_RAW,
            CATALOG_CACHE)

SQL_FORMATS = ("table", "csv", "jsonl", "parquet")
# Where energy is counted: the GPUs as measured, the whole server, the server in its data centre.
BOUNDARIES = ("gpu_only", "server", "facility")

# The names the fetchers (pipeline/fetch.py, pipeline/upstream.py) and the tests import.
DEFAULT_OUT = OUT.default
DEFAULT_TIMEOUT_S, DEFAULT_FETCH_DEADLINE_S, DEFAULT_MAX_FILE_BYTES = (
    TIMEOUT.default, FETCH_DEADLINE.default, MAX_FILE_BYTES.default)


def shown(setting: Setting) -> str:
    """A default as people read it: 30 for 30.0, a path relative to the project; '' for none."""
    value = setting.default
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Path) and value.is_absolute():
        return str(value.relative_to(TIERS_FILE.parent.parent))
    return "" if value is None else str(value)


def described(setting: Setting) -> str:
    """The default, or what happens without one as the help says it."""
    found = re.search(r"\(default: (.*)\)$", setting.help)
    return shown(setting) or (found.group(1) if found else "-")


def table() -> str:
    """Every setting for docs/cli.md: the option or environment variable, the make variable, the default."""
    rows = [f"| `{s.name}` | {f'`{s.make}`' if s.make else ''} | {described(s)} | {s.help.split(' (default')[0]} |"
            for s in SETTINGS]
    return "\n".join(["| setting | make | default | what it is for |", "| --- | --- | --- | --- |", *rows])


if __name__ == "__main__":  # make help: the variables make passes to the CLI, with their defaults
    sys.stdout.write("".join(f"  {s.make:<16} {described(s)}\n" for s in SETTINGS if s.make))
