"""The load floor: DuckDB alone loads the Parquet files a refresh published (every table's folder) into
tables of a new database file, as the build does before it creates the views, and does nothing else.

Usage: python bench/floor_load.py PARQUET_DIR DATABASE_FILE
"""

import sys
from pathlib import Path

import duckdb


def main(parquet: Path, database: Path) -> None:
    connection = duckdb.connect(str(database))
    connection.execute("set enable_progress_bar = false")
    for folder in sorted(path for path in parquet.iterdir() if path.is_dir()):
        files = sorted(str(path) for path in folder.rglob("*.parquet"))
        if files:
            connection.execute(f'create table "{folder.name}" as select * from read_parquet(?, union_by_name = true,'
                               " hive_partitioning = false)", [files])
    connection.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
