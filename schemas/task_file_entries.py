"""The columns and rules every task-file entry shares, token or diffusion; the two schemas extend it."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import rules


class TaskFileEntry(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(description="Snapshot the row was read from.")
    task: Series[str] = pa.Field(description="Upstream task identifier.")
    source_ordinal: Series[pd.Int64Dtype] = pa.Field(
        ge=0, description="0-based position of the entry in its task file's configurations array."
    )
    repeat: Series[pd.Int64Dtype] = pa.Field(
        ge=1,
        description="1-based ordinal, in file order, among entries sharing the measured configuration (the "
        "schema's CONFIGURATION_KEY): tells two measurements of one configuration apart.",
    )
    model_id: Series[str] = pa.Field(metadata={"upstream": "required"}, description="Hugging Face model id.")
    nickname: Series[str] = pa.Field(metadata={"upstream": "required"}, description="Display name.")
    total_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Total parameters, billions."
    )
    activated_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Parameters active per token or step, billions."
    )
    gpu_model: Series[str] = pa.Field(
        str_length={"min_value": 1}, metadata={"upstream": "required"}, description="GPU model, e.g. H100."
    )
    num_gpus: Series[pd.Int64Dtype] = pa.Field(
        ge=1, le=1024, metadata={"upstream": "required"}, description="GPUs serving the model."
    )
    avg_power_watts: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Average total GPU power, watts."
    )
    extra_fields: Series[str] = pa.Field(
        nullable=True,
        description="JSON object of upstream keys this schema does not know yet (sorted), kept so nothing is lost.",
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
