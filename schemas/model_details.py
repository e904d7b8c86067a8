"""model_details: one row per snapshot × per-model detail file (models/<org>__<model>__<task>.json),
its model-level fields. Its configurations and histograms are in model_detail_configurations and
output_length_histograms."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import rules


class ModelDetails(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    file_name: Series[str] = pa.Field()
    task: Series[str] = pa.Field(metadata={"upstream": "required"})
    model_id: Series[str] = pa.Field(metadata={"upstream": "required"})
    nickname: Series[str] = pa.Field(nullable=True, metadata={"upstream": "optional"})
    total_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    activated_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    weight_precision: Series[str] = pa.Field(nullable=True, metadata={"upstream": "optional"})
    architecture: Series[str] = pa.Field(nullable=True, metadata={"upstream": "optional"})
    is_moe: Series[pd.BooleanDtype] = pa.Field(nullable=True, metadata={"upstream": "optional"})
    configuration_count: Series[pd.Int64Dtype] = pa.Field(ge=0)
    extra_fields: Series[str] = pa.Field(
        nullable=True,
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
