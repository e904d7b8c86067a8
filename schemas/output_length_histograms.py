"""output_length_histograms: the output-length distributions of the per-model detail files, one row
per bin, for the model as a whole and for each configuration."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

SCOPES = ["model", "configuration"]


class OutputLengthHistograms(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    task: Series[str] = pa.Field()
    model_id: Series[str] = pa.Field()
    scope: Series[str] = pa.Field(isin=SCOPES)
    detail_ordinal: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0)
    bin_index: Series[pd.Int64Dtype] = pa.Field(ge=0)
    lower_edge: Series[float] = pa.Field()
    upper_edge: Series[float] = pa.Field()
    count: Series[pd.Int64Dtype] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task", "model_id", "scope", "detail_ordinal", "bin_index"]

    @pa.dataframe_check(error="lower_edge < upper_edge")
    def edges_increase(cls, df: pd.DataFrame) -> Series[bool]:
        return (df.lower_edge < df.upper_edge).astype(bool)
