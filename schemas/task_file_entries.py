"""The columns and rules every task-file entry shares, token or diffusion; the two schemas extend it."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import rules


class TaskFileEntry(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    task: Series[str] = pa.Field()
    source_ordinal: Series[pd.Int64Dtype] = pa.Field(ge=0)
    repeat: Series[pd.Int64Dtype] = pa.Field(
        ge=1,
    )
    model_id: Series[str] = pa.Field(metadata={"upstream": "required"})
    nickname: Series[str] = pa.Field(metadata={"upstream": "required"})
    total_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    activated_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    gpu_model: Series[str] = pa.Field(str_length={"min_value": 1}, metadata={"upstream": "required"})
    num_gpus: Series[pd.Int64Dtype] = pa.Field(ge=1, le=1024, metadata={"upstream": "required"})
    avg_power_watts: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    extra_fields: Series[str] = pa.Field(
        nullable=True,
    )

    @pa.check("model_id", error=rules.MODEL_ID_ERROR)
    def model_id_is_safe(cls, model_id: Series[str]) -> Series[bool]:
        return rules.model_id_is_safe(model_id)

    @pa.dataframe_check(error=rules.POWER_ERROR)
    def power_within_rating(cls, df: pd.DataFrame) -> Series[bool]:
        return rules.power_within_rating(df)

    @pa.dataframe_check(raise_warning=True, error=rules.GPU_KNOWN_ERROR)
    def gpu_power_rating_known(cls, df: pd.DataFrame) -> Series[bool]:
        return rules.gpu_power_rating_known(df)
