"""Fingerprints of everything a build publishes, to show a change of code moved none of it: every table
and view of the eleven-snapshot history (rows in any order; floats to 6 significant digits, and each
float column's sum to 1e-9 relative, so a change of summation order is not a change) and every index
and release file of each snapshot built alone (sha256).

`python tests/parity.py record` writes tests/parity_reference.json with the checked-out code; the slow
test in test_parity.py builds with the current code and compares."""

import hashlib
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import msgspec

REFERENCE = Path(__file__).with_name("parity_reference.json")
# A sha256 prefix of 64 bits: enough to tell a changed file or view, and the reference stays small.
DIGITS = 16
# What a build records of itself rather than computes from the input: its OUT path and code digest
# (build_inputs) and the field dictionary's wording (data_dictionary).
NOT_COMPARED = {"build_inputs", "data_dictionary"}
# Derivations that moved from ingest into the views (staging, and model_detail_matches for the detail
# files; their rows keep them, and are compared): the raw tables hold what the upstream published, so
# these columns are left out of the raw tables' rows.
MOVED_TO_STAGING = {"token_configurations": ("repeat", "avg_output_len", "is_avg_output_len_derived"),
                    "diffusion_configurations": ("repeat",), "model_detail_configurations": ("repeat",)}
# Facts about the run, not the input: the day the fetch first read a snapshot's content (retrieved) and the
# folder or address it was read from (source; CI's checkout is not this machine's).
RUN_FACTS = {**{name: ("retrieved",) for name in ("data_version", "index_history")},
             **{name: ("retrieved", "source") for name in ("snapshots", "snapshot_history")}}


def _canonical(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6e}" if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_canonical(item)}" for key, item in value.items()) + "}"
    return repr(value)


def database_fingerprints(database: Path) -> dict[str, dict[str, Any]]:
    fingerprints = {}
    with duckdb.connect(str(database), read_only=True) as connection:
        names = [row[0] for row in connection.execute(
            "select table_name from duckdb_tables() where not internal union all "
            "select view_name from duckdb_views() where not internal").fetchall()]
        for name in sorted(set(names) - NOT_COMPARED):
            present = {row[0] for row in connection.execute(f'describe "{name}"').fetchall()}
            left_out = (*MOVED_TO_STAGING.get(name, ()), *RUN_FACTS.get(name, ()))
            moved = ", ".join(f'"{column}"' for column in left_out if column in present)
            result = connection.execute(f'select * {f"exclude ({moved})" if moved else ""} from "{name}"')
            columns = [column[0] for column in result.description]
            rows = result.fetchall()
            digest = hashlib.sha256()
            for line in sorted("\x1f".join(_canonical(value) for value in row) for row in rows):
                digest.update(line.encode() + b"\n")
            sums = {column: math.fsum(row[i] for row in rows if isinstance(row[i], float) and math.isfinite(row[i]))
                    for i, column in enumerate(columns) if any(isinstance(row[i], float) for row in rows)}
            fingerprints[name] = {"columns": columns, "rows": len(rows), "sha256": digest.hexdigest()[:DIGITS],
                                  "sums": sums}
    return fingerprints


def file_fingerprints(roots: Iterable[Path]) -> dict[str, str]:
    fingerprints = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                relative = f"{root.name}/{path.relative_to(root).as_posix()}"
                fingerprints[relative] = hashlib.sha256(path.read_bytes()).hexdigest()[:DIGITS]
    return fingerprints


def differences(reference: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two fingerprint sets, one line each: a table or view gone or with other rows,
    an index or release file gone, new or with other bytes."""
    found = []
    for section in ("database", "files"):
        for unit in sorted(set(reference[section]) | set(current[section])):
            old, new = reference[section].get(unit, {}), current[section].get(unit, {})
            for name in sorted(set(old) | set(new)):
                if name not in old and section == "database":
                    continue  # a new view adds an answer; it changes none of the old ones
                if name not in new or name not in old:
                    found.append(f"{section} {unit}: {name} {'gone' if name not in new else 'new'}")
                elif section == "files" and old[name] != new[name]:
                    found.append(f"files {unit}: {name} differs")
                elif section == "database" and not _same_rows(old[name], new[name]):
                    found.append(f"database {unit}: {name}: {old[name]['rows']} rows before, {new[name]['rows']} now"
                                 f"{'' if old[name]['columns'] == new[name]['columns'] else ', other columns'}")
    return found


def _same_rows(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return (old["columns"], old["rows"], old["sha256"]) == (new["columns"], new["rows"], new["sha256"]) and all(
        math.isclose(old["sums"][column], new["sums"].get(column, math.nan), rel_tol=1e-9, abs_tol=1e-9)
        for column in old["sums"])


def build_fingerprints(work: Path) -> dict[str, Any]:
    """Build the history and each snapshot alone (with its release) under `work`, with the seed's dates."""
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import SEED_AS_OF, SEED_RETRIEVED, SNAPSHOTS, UPSTREAM

    from pipeline.cli import main

    dates = ["--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED]
    history = work / "history"
    assert main(["history", "--source", str(UPSTREAM), *dates, "--out", str(history)]) == 0
    fingerprints: dict[str, Any] = {"database": {"history": database_fingerprints(history / "energy_index.duckdb")},
                                    "files": {}}
    for snapshot in SNAPSHOTS:
        out = work / snapshot.name
        assert main(["refresh", "--source", str(snapshot), *dates, "--out", str(out)]) == 0
        assert main(["release", "--out", str(out)]) == 0
        fingerprints["files"][snapshot.name] = file_fingerprints([out / "index", out / "release"])
    return fingerprints


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        REFERENCE.write_bytes(msgspec.json.encode(build_fingerprints(Path(work))) + b"\n")
    print(f"wrote {REFERENCE}")
