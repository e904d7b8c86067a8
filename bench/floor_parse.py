"""The physical floor: parsing every JSON file of a snapshot with msgspec, one process per core, and
nothing else (no types checked, nothing kept). Below this no reading of the snapshot can go.

Usage: python bench/floor_parse.py SNAPSHOT_DIR
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec


def parse(names: list[str]) -> int:
    for name in names:
        with open(name, "rb") as handle:
            msgspec.json.decode(handle.read())
    return len(names)


def main(source: Path) -> None:
    files = sorted(str(path) for path in source.rglob("*.json"))
    cores = len(os.sched_getaffinity(0))
    # Largest first, dealt round-robin: each process gets about the same number of bytes.
    files.sort(key=os.path.getsize, reverse=True)
    shares = [files[share::cores] for share in range(cores)]
    with ProcessPoolExecutor(cores) as pool:
        assert sum(pool.map(parse, shares)) == len(files)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
