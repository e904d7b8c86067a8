"""Pandera schemas, one per Parquet table: the single source of column names, types and checks.

Conventions read by the pipeline (see ``pipeline/validate.py``):

- A column whose field metadata has ``upstream: "required"`` is copied from the upstream JSON key of
  the same name, which every entry must carry; ``upstream: "optional"`` marks a key the upstream has
  added or removed over its history (absent means null). Columns without ``upstream`` are added by
  the pipeline.
- ``Config.unique`` is the table's key.
"""

from typing import Any

TABLE_MODULES = {
    "snapshots": ("schemas.snapshots", "Snapshots"),
    "tasks": ("schemas.tasks", "Tasks"),
    "models": ("schemas.models", "Models"),
    "token_configurations": ("schemas.token_configurations", "TokenConfigurations"),
    "diffusion_configurations": ("schemas.diffusion_configurations", "DiffusionConfigurations"),
    "model_details": ("schemas.model_details", "ModelDetails"),
    "model_detail_configurations": ("schemas.model_detail_configurations", "ModelDetailConfigurations"),
    "output_length_histograms": ("schemas.output_length_histograms", "OutputLengthHistograms"),
}


def __getattr__(name: str) -> Any:
    """Import the schemas (and pandera) only when a step asks for them, not when fetch reads rules."""
    import importlib

    if name == "TABLES":
        return {table: getattr(importlib.import_module(module), cls) for table, (module, cls) in TABLE_MODULES.items()}
    for module, cls in TABLE_MODULES.values():
        if cls == name:
            return getattr(importlib.import_module(module), cls)
    raise AttributeError(name)
