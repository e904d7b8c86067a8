"""models: one row per snapshot × model, from index.json's models map."""

import pandera.pandas as pa
from pandera.typing import Series


class Models(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    model_id: Series[str] = pa.Field()
    nickname: Series[str] = pa.Field(metadata={"upstream": "required"})
    total_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    activated_params_billions: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    architecture: Series[str] = pa.Field(
        nullable=True,
        metadata={"upstream": "optional"},
    )
    weight_precision: Series[str] = pa.Field(
        nullable=True,
        metadata={"upstream": "optional"},
    )
    extra_fields: Series[str] = pa.Field(
        nullable=True,
    )

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "model_id"]
