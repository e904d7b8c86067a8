"""model_details: one row per snapshot × per-model detail file (models/<org>__<model>__<task>.json),
its model-level fields. Its configurations and histograms are in model_detail_configurations and
output_length_histograms."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import rules


class ModelDetails(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(description="Snapshot the row was read from.")
    file_name: Series[str] = pa.Field(description="The detail file's name under models/.")
    task: Series[str] = pa.Field(metadata={"upstream": "required"}, description="Upstream task identifier.")
    model_id: Series[str] = pa.Field(metadata={"upstream": "required"}, description="Hugging Face model id.")
    nickname: Series[str] = pa.Field(
        nullable=True, metadata={"upstream": "optional"}, description="Display name (diffusion files only)."
    )
    total_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Total parameters, billions."
    )
    activated_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Active parameters, billions."
    )
    weight_precision: Series[str] = pa.Field(
        nullable=True, metadata={"upstream": "optional"}, description="Weight precision as the upstream spells it."
    )
    architecture: Series[str] = pa.Field(
        nullable=True, metadata={"upstream": "optional"}, description="Architecture (token tasks only)."
    )
    is_moe: Series[pd.BooleanDtype] = pa.Field(
        nullable=True, metadata={"upstream": "optional"}, description="Mixture of experts (one early file only)."
    )
    configuration_count: Series[pd.Int64Dtype] = pa.Field(
        ge=0, description="Entries in the file's configurations array."
    )
    extra_fields: Series[str] = pa.Field(
        nullable=True,
        description="JSON object of upstream keys this schema does not know (e.g. an early itl_distribution), kept "
        "so nothing is lost.",
    )

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task", "model_id"]

    @pa.check("model_id", error=rules.MODEL_ID_ERROR)
    def model_id_is_safe(cls, model_id: Series[str]) -> Series[bool]:
        return rules.model_id_is_safe(model_id)

    @pa.dataframe_check(error="file_name is <model_id with / as __>__<task>.json")
    def file_name_matches_contents(cls, df: pd.DataFrame) -> Series[bool]:
        expected = df.model_id.str.replace("/", "__", regex=False) + "__" + df.task + ".json"
        return (df.file_name == expected).astype(bool)
