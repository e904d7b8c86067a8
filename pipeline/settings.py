"""Every default a user can change, declared once with what it is for: the CLI's options, the Makefile's
help and the docs read them from here. Imports nothing heavy, so that building the command line (and
`energy-index --version`) costs no more than Python's start."""

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """A value read from the environment when used, with its default and what it is for."""

    environment_variable: str
    default: str
    help: str

    def value(self) -> str:
        return (os.environ.get(self.environment_variable) or self.default).rstrip("/")


# Where every output goes unless --out (make OUT=) says otherwise.
DEFAULT_OUT = Path("build")

# With no source given, the pipeline follows the upstream: the newest commit of UPSTREAM_REPOSITORY
# that touched UPSTREAM_PATH, asked of GitHub's REST API, its files read from GitHub's raw-file host at
# that commit. Both hosts are settings so that a mirror, a proxy or a test server can stand in.
UPSTREAM_REPOSITORY = "ml-energy/leaderboard"
UPSTREAM_PATH = "public/data"
GITHUB_API = Setting("ENERGY_INDEX_GITHUB_API", "https://api.github.com", "GitHub's REST API")
GITHUB_RAW = Setting("ENERGY_INDEX_GITHUB_RAW", "https://raw.githubusercontent.com", "GitHub's raw-file host")
# Sent to the API host only, never to the raw-file host: it raises the API's limit of 60 requests an hour.
GITHUB_TOKEN_VARIABLE = "GITHUB_TOKEN"
# A commit as --commit (make COMMIT=) takes it: 7 to 40 hex digits, as git abbreviates.
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{7,40}$")

# Wall-clock deadlines for a URL: one per file and one for the whole fetch; a server that trickles
# bytes extends neither.
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_FETCH_DEADLINE_S = 900.0
# The largest upstream file today is 0.4 MB, and 406 MB at the benchmark's 1000x scale; 1 GiB leaves
# room for that and still stops an endless body.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024 * 1024

# energy-index sql: the output formats, and the bounds a query runs within (a heavy query must not
# hold the machine: DuckDB's own default memory limit is 80 % of it).
SQL_FORMATS = ("table", "csv", "jsonl", "parquet")
DEFAULT_SQL_TIMEOUT_S = 60.0
DEFAULT_SQL_MEMORY_LIMIT = "4GB"
