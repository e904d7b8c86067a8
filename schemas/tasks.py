"""tasks: one row per snapshot × upstream task, from index.json, the task files and the source card."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

FAMILIES = ["llm", "mllm", "diffusion"]


class Tasks(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(description="Snapshot the row was read from.")
    task: Series[str] = pa.Field(
        str_matches=r"^[a-z0-9][a-z0-9-]*$", description="Upstream task identifier, e.g. lm-arena-chat."
    )
    display_name: Series[str] = pa.Field(description="The task file's task_display_name.")
    workload_label: Series[str] = pa.Field(
        description="The upstream web app's tab label for the task (from the source card)."
    )
    family: Series[str] = pa.Field(
        isin=FAMILIES, description="Model family from index.json's architectures map: llm, mllm or diffusion."
    )
    index_position: Series[pd.Int64Dtype] = pa.Field(ge=0, description="0-based position in index.json's tasks list.")
    file_architecture: Series[str] = pa.Field(
        nullable=True, description="The task file's own top-level architecture field (diffusion files carry one)."
    )
    file_extra_fields: Series[str] = pa.Field(
        nullable=True, description="JSON object of the task file's unknown top-level keys, kept so nothing is lost."
    )

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task"]
