"""energy-index synth: a snapshot N times the size of a real one, for benchmarks.

Replica 0 is the real snapshot; replica r > 0 copies every model under a new id (<id>-synth<r>) in
every task, index.json and detail file, with energy and power scaled by one factor per replica,
task and model drawn from a seeded generator: 0.98 to 1.0, so every row stays valid (power never
rises above the rated board power) and the physical identities between fields still hold.
"""

import hashlib
import random
import shutil
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.export import dump_json
from pipeline.files import load_json_strict

# Fields scaled together, so that energy = power / throughput (token) and energy = power × latency ÷
# batch (diffusion) stay true.
SCALED_FIELDS = (
    "energy_per_token_joules", "energy_per_request_joules", "energy_per_image_joules", "energy_per_video_joules",
    "avg_power_watts",
)


def _replica_id(model_id: str, replica: int) -> str:
    return model_id if replica == 0 else f"{model_id}-synth{replica}"


def _factor(seed: int, replica: int, task: str, model_id: str) -> float:
    if replica == 0:
        return 1.0
    digest = hashlib.sha256(f"{seed}\0{replica}\0{task}\0{model_id}".encode()).digest()
    return 1.0 - random.Random(digest).uniform(0.0, 0.02)


def _scaled(row: dict[str, Any], factor: float, model_id: str) -> dict[str, Any]:
    copy = dict(row)
    for field in SCALED_FIELDS:
        if isinstance(copy.get(field), float):
            copy[field] = copy[field] * factor
    if "model_id" in copy:
        copy["model_id"] = model_id
    return copy


def _write(path: Path, document: Any) -> int:
    """The upstream's layout: json.dumps(indent=2), byte for byte (written by the export's fast writer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dump_json(document)
    path.write_bytes(data)
    return len(data)


def synthesize(source: Path, out: Path, scale: int, seed: int = 0) -> dict[str, int]:
    """Write a snapshot `scale` times the size of `source` into `out` (replaced). Returns counts."""
    if scale < 1:
        raise PipelineError(f"scale must be at least 1, got {scale}")
    if out.exists():
        shutil.rmtree(out)
    index = load_json_strict(source / "index.json", "index.json")
    replicas = range(scale)
    models = {_replica_id(m, r): fields for r in replicas for m, fields in index["models"].items()}
    total_bytes = _write(out / "index.json", {**index, "models": models})
    configurations = 0
    for task in index["tasks"]:
        document = load_json_strict(source / "tasks" / f"{task}.json", f"tasks/{task}.json")
        rows = [
            _scaled(row, _factor(seed, r, task, row["model_id"]), _replica_id(row["model_id"], r))
            for r in replicas
            for row in document["configurations"]
        ]
        configurations += len(rows)
        total_bytes += _write(out / "tasks" / f"{task}.json", {**document, "configurations": rows})
    model_files = 0
    for path in sorted((source / "models").glob("*.json")):
        detail = load_json_strict(path, f"models/{path.name}")
        for r in replicas:
            model_id = _replica_id(detail["model_id"], r)
            factor = _factor(seed, r, detail["task"], detail["model_id"])
            copy = {
                **detail,
                "model_id": model_id,
                "configurations": [_scaled(row, factor, model_id) for row in detail["configurations"]],
            }
            name = f"{model_id.replace('/', '__')}__{detail['task']}.json"
            total_bytes += _write(out / "models" / name, copy)
            model_files += 1
    return {"configurations": configurations, "model_files": model_files, "bytes": total_bytes}
