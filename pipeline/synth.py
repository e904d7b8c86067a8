"""energy-index synth: a snapshot N times the size of a real one, for benchmarks.

Replica 0 is the real snapshot; replica r > 0 copies every model under a new id (<id>-synth<r>) in
every task, index.json and detail file, with energy and power scaled by one factor per replica,
task and model drawn from a seeded generator: 0.98 to 1.0, so every row stays valid (power never
rises above the rated board power) and the physical identities between fields still hold.
"""

import random
from pathlib import Path
from typing import Any

import msgspec

from pipeline.errors import PipelineError
from pipeline import jsontext
from pipeline.files import staged_directory

# Fields scaled together, so that energy = power / throughput (token) and energy = power × latency ÷
# batch (diffusion) stay true.
SCALED_FIELDS = (
    "energy_per_token_joules", "energy_per_request_joules", "energy_per_image_joules", "energy_per_video_joules",
    "avg_power_watts",
)


def _replica_id(model_id: str, replica: int) -> str:
    return model_id if replica == 0 else f"{model_id}-synth{replica}"


def _factor(seed: int, replica: int, task: str, model_id: str) -> float:
    """A model's factor in one replica (a string seeds Python's generator alike in every process)."""
    return 1.0 - random.Random(f"{seed}\0{replica}\0{task}\0{model_id}").uniform(0.0, 0.02) if replica else 1.0


def _scaled(row: dict[str, Any], factor: float, model_id: str) -> dict[str, Any]:
    scaled = {field: row[field] * factor for field in SCALED_FIELDS if isinstance(row.get(field), float)}
    return {**row, **({"model_id": model_id} if "model_id" in row else {}), **scaled}


def synthesize(source: Path, out: Path, scale: int, seed: int = 0) -> dict[str, int]:
    """Write a snapshot `scale` times the size of `source` into `out` (replaced). Returns counts."""
    if scale < 1:
        raise PipelineError(f"scale must be at least 1, got {scale}")
    counts = {"configurations": 0, "model_files": 0, "bytes": 0}

    def read(name: str) -> Any:
        return msgspec.json.decode((source / name).read_bytes())

    with staged_directory(out) as staging:

        def write(name: str, document: dict[str, Any]) -> None:
            """The upstream's layout: json.dumps(indent=2), byte for byte (the export's fast writer)."""
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            counts["bytes"] += (staging / name).write_bytes(jsontext.dumps(document))

        index = read("index.json")
        models = {_replica_id(m, r): fields for r in range(scale) for m, fields in index["models"].items()}
        write("index.json", {**index, "models": models})
        for task in index["tasks"]:
            document = read(f"tasks/{task}.json")
            rows = [_scaled(row, _factor(seed, r, task, row["model_id"]), _replica_id(row["model_id"], r))
                    for r in range(scale) for row in document["configurations"]]
            counts["configurations"] += len(rows)
            write(f"tasks/{task}.json", {**document, "configurations": rows})
        for path in sorted((source / "models").glob("*.json")):
            detail = read(f"models/{path.name}")
            for r in range(scale):
                model_id = _replica_id(detail["model_id"], r)
                factor = _factor(seed, r, detail["task"], detail["model_id"])
                rows = [_scaled(row, factor, model_id) for row in detail["configurations"]]
                write(f"models/{model_id.replace('/', '__')}__{detail['task']}.json",
                      {**detail, "model_id": model_id, "configurations": rows})
                counts["model_files"] += 1
    return counts
