"""tasks: one row per snapshot × upstream task, from index.json, the task files and the source card."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

FAMILIES = ["llm", "mllm", "diffusion"]


class Tasks(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    task: Series[str] = pa.Field(str_matches=r"^[a-z0-9][a-z0-9-]*$")
    display_name: Series[str] = pa.Field()
    workload_label: Series[str] = pa.Field()
    family: Series[str] = pa.Field(isin=FAMILIES)
    index_position: Series[pd.Int64Dtype] = pa.Field(ge=0)
    file_architecture: Series[str] = pa.Field(nullable=True)
    file_extra_fields: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task"]
