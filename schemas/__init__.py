"""Pandera schemas, one per Parquet table: the single source of column names, types and checks.

Conventions read by the pipeline (see ``pipeline/validate.py``):

- A column whose field metadata has ``upstream: "required"`` is copied from the upstream JSON key of
  the same name, which every entry must carry; ``upstream: "optional"`` marks a key the upstream has
  added or removed over its history (absent means null). Columns without ``upstream`` are added by
  the pipeline.
- ``Config.unique`` is the table's key.
"""

from schemas.models import Models
from schemas.snapshots import Snapshots
from schemas.tasks import Tasks
from schemas.token_configurations import TokenConfigurations

TABLES = {
    "snapshots": Snapshots,
    "tasks": Tasks,
    "models": Models,
    "token_configurations": TokenConfigurations,
}

__all__ = ["TABLES", "Models", "Snapshots", "Tasks", "TokenConfigurations"]
