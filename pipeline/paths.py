"""Every path the pipeline reads or writes, derived from one output root. No other module spells a path.

Layout under OUT:
  raw/<snapshot-id>/           fetched snapshots (append-only store, outside the published generations)
  raw/.upstream.json           the upstream's last commit listing (ETag, newest commit)
  .generations/<n>/            complete builds: parquet/<table>/snapshot_id=<id>/data.parquet (hive layout;
                               the change tables' newer_snapshot_id=<id>/; parquet/<table>/data.parquet
                               for the reference tables, one file each),
                               energy_index.duckdb, index/
  current -> .generations/<n>  the published build, switched by one atomic rename
  parquet, energy_index.duckdb, index -> current/...   fixed names for readers
"""

from dataclasses import dataclass, replace
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE.parent
SQL_DIR = PROJECT_ROOT / "sql"
SOURCE_CARD = PACKAGE / "source_card.toml"
AUDIT_RULES = PACKAGE / "audit_rules.toml"
LATENCY_TIERS = PACKAGE / "latency_tiers.toml"
ECOLOGITS = PACKAGE / "ecologits.toml"
BOUNDARY_FACTORS = PACKAGE / "boundary_factors.toml"
INDEX_V2 = PACKAGE / "index_v2.toml"

PUBLISHED_OUTPUTS = ("parquet", "energy_index.duckdb", "index")
PAIR_TABLES = ("configuration_changes", "index_changes")
PARQUET_FILE = "data.parquet"


def hive_key(table: str) -> str:
    """The column a table's folders are named after (<table>/<key>=<id>/), one the files also hold. The
    change tables hold one consecutive pair of snapshots per file, stored under the newer one: the folder
    is named after the column that holds it, so that a hive reader adds no second column."""
    return "newer_snapshot_id" if table in PAIR_TABLES else "snapshot_id"


def order_column(table: str) -> str:
    """The column of a table's files that holds, in each row, when the folder's snapshot was made as the
    history orders snapshots (archive.snapshot_ordered_at): what a reader of the files sorts by, since the
    folder names sort alphabetically, not in commit order. The database leaves it out: its order is
    snapshot_history's."""
    return "newer_snapshot_ordered_at" if table in PAIR_TABLES else "snapshot_ordered_at"


@dataclass(frozen=True)
class Paths:
    out: Path
    # The build being written; None means the published one (what readers see).
    generation: Path | None = None

    def staged(self, generation: Path) -> "Paths":
        return replace(self, generation=generation)

    @property
    def raw_dir(self) -> Path:
        return self.out / "raw"

    def raw_snapshot(self, snapshot_id: str) -> Path:
        return self.raw_dir / snapshot_id

    @property
    def latest_snapshot_pointer(self) -> Path:
        """Names the snapshot the last fetch delivered; ingest reads it when no snapshot is given."""
        return self.raw_dir / "LATEST"

    @property
    def upstream_state(self) -> Path:
        """The upstream's last commit listing: its ETag and newest commit, for a conditional request."""
        return self.raw_dir / ".upstream.json"

    @property
    def lock_file(self) -> Path:
        return self.out / ".lock"

    @property
    def generations_dir(self) -> Path:
        return self.out / ".generations"

    @property
    def current(self) -> Path:
        return self.out / "current"

    @property
    def build_root(self) -> Path:
        return self.generation or self.current

    @property
    def parquet_dir(self) -> Path:
        return self.build_root / "parquet"

    def parquet_path(self, table: str, snapshot_id: str) -> Path:
        """One file per table and snapshot, in the hive layout that Spark, Trino, DuckDB, pyarrow and polars
        read as one dataset: a new snapshot adds a folder and never rewrites another's."""
        return self.parquet_dir / table / f"{hive_key(table)}={snapshot_id}" / PARQUET_FILE

    def reference_parquet_path(self, table: str) -> Path:
        """A table that is not per snapshot (the build's parameters and declarations): one file."""
        return self.parquet_dir / table / PARQUET_FILE

    def parquet_files(self, table: str) -> dict[str, Path]:
        """The table's file of every snapshot, by snapshot id."""
        key = hive_key(table)
        return {path.parent.name.removeprefix(f"{key}="): path
                for path in sorted((self.parquet_dir / table).glob(f"{key}=*/{PARQUET_FILE}"))}

    @property
    def database(self) -> Path:
        return self.build_root / "energy_index.duckdb"

    @property
    def index_dir(self) -> Path:
        return self.build_root / "index"

    def task_index_dir(self, task: str) -> Path:
        return self.index_dir / task


def code_digest() -> str:
    """What outputs depend on besides the input and the parameters: this code, its declarations and
    the libraries' versions (their {name}-{version}.dist-info folders, found in a millisecond where
    reading each one's metadata takes tens, which a refresh with nothing to do would pay)."""
    from importlib.util import find_spec

    from pipeline.fingerprint import files_sha256

    schemas = PROJECT_ROOT / "schemas"
    sources = [*PACKAGE.glob("*.py"), *PACKAGE.glob("*.toml"), *schemas.glob("*.py"), *schemas.glob("*.toml"),
               *SQL_DIR.rglob("*.sql")]
    libraries = []
    for name in ("duckdb", "pyarrow", "pandera", "pandas", "msgspec"):
        origin = (spec := find_spec(name)) and spec.origin
        found = list(Path(origin).parent.parent.glob(f"{name}-*.dist-info")) if origin else []
        if len(found) == 1:
            libraries.append(found[0].name)
        else:  # only then importlib.metadata, whose import alone takes 15 ms
            from importlib.metadata import version

            libraries.append(f"{name}={version(name)}")
    return files_sha256(sources, PROJECT_ROOT, "\0".join(libraries))
