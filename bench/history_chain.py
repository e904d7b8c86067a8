"""Chained synthetic snapshots for history benchmarks and tests: snapshot k is snapshot k-1 with about
5 % of its configurations re-measured, dated one week later.

Deterministic for a seed. Snapshot 0 is the source itself (a real snapshot); each later one keeps the
upstream's layout (index.json, tasks/, models/, snapshot.json with commit facts) and re-measures a
seeded 5 % of the task-file rows: energy and power scaled together by a factor in [0.97, 1.0], so
energy per token stays power ÷ throughput and energy per image or video power × latency ÷ batch, and
power never rises above the rated board power. Detail files are carried over unchanged.

Usage: python bench/history_chain.py --source DIR --target DIR --count N [--seed S]
"""

import argparse
import hashlib
import json
import random
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

SCALED = ("energy_per_token_joules", "energy_per_request_joules", "energy_per_image_joules",
          "energy_per_video_joules", "avg_power_watts")
CHANGED_SHARE = 0.05
FIRST_COMMIT_TIME = datetime(2026, 3, 1, tzinfo=timezone.utc)


def _write(path: Path, document: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")


def _commit(seed: int, number: int) -> str:
    return hashlib.sha1(f"history-chain {seed} {number}".encode()).hexdigest()


def chain(source: Path, target: Path, count: int, seed: int = 0) -> list[Path]:
    """Write `count` snapshot folders under `target` (000-<commit>, ...); return them oldest first."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    index = json.loads((source / "index.json").read_text(encoding="utf-8"))
    tasks = {task: json.loads((source / "tasks" / f"{task}.json").read_text(encoding="utf-8")) for task in index["tasks"]}
    folders = []
    for number in range(count):
        rng = random.Random(f"{seed}:{number}")
        if number > 0:
            for document in tasks.values():
                for row in document["configurations"]:
                    if rng.random() < CHANGED_SHARE:
                        factor = rng.uniform(0.97, 1.0)
                        for field in SCALED:
                            if isinstance(row.get(field), float):
                                row[field] *= factor
        commit = _commit(seed, number)
        time = FIRST_COMMIT_TIME + timedelta(weeks=number)
        folder = target / f"{number:04d}-{commit[:7]}"
        shutil.copytree(source / "models", folder / "models")
        _write(folder / "index.json", {**index, "last_updated": time.date().isoformat()})
        for task, document in tasks.items():
            _write(folder / "tasks" / f"{task}.json", document)
        _write(folder / "snapshot.json", {
            "repository": "synthetic/history-chain", "commit": commit, "commit_time": time.isoformat(),
            "commit_subject": f"synthetic snapshot {number}", "tasks_last_commit_date": time.date().isoformat(),
        })
        folders.append(folder)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    folders = chain(args.source, args.target, args.count, args.seed)
    print(f"history chain: {len(folders)} snapshots -> {args.target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
