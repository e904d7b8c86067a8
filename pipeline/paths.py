"""Every path the pipeline reads or writes, derived from one output root. No other module spells a path."""

from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = PROJECT_ROOT / "sql"
SOURCE_CARD = Path(__file__).resolve().parent / "source_card.toml"


@dataclass(frozen=True)
class Paths:
    out: Path

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
    def parquet_dir(self) -> Path:
        return self.out / "parquet"

    def parquet_path(self, table: str) -> Path:
        return self.parquet_dir / f"{table}.parquet"

    @property
    def database(self) -> Path:
        return self.out / "energy_index.duckdb"

    @property
    def index_dir(self) -> Path:
        return self.out / "index"

    def task_index_dir(self, task: str) -> Path:
        return self.index_dir / task
