"""models: one row per snapshot × model, from index.json's models map."""

import pandera.pandas as pa
from pandera.typing import Series


class Models(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(description="Snapshot the row was read from.")
    model_id: Series[str] = pa.Field(description="Hugging Face model id, e.g. meta-llama/Llama-3.1-8B-Instruct.")
    nickname: Series[str] = pa.Field(metadata={"upstream": "required"}, description="Display name.")
    total_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Total parameters, billions."
    )
    activated_params_billions: Series[float] = pa.Field(
        gt=0, metadata={"upstream": "required"}, description="Parameters active per token, billions."
    )
    architecture: Series[str] = pa.Field(
        nullable=True,
        metadata={"upstream": "optional"},
        description="Architecture (e.g. MoE, Dense Transformer); the upstream omits it for diffusion models.",
    )
    weight_precision: Series[str] = pa.Field(
        nullable=True,
        metadata={"upstream": "optional"},
        description="Weight precision as the upstream spells it (bfloat16, fp8, mxfp4).",
    )
    extra_fields: Series[str] = pa.Field(
        nullable=True,
        description="JSON object of upstream keys this schema does not know yet (sorted), kept so nothing is lost.",
    )

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "model_id"]
