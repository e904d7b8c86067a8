"""output_length_histograms: the output-length distributions of the per-model detail files, one row
per bin, for the model as a whole and for each configuration."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

SCOPES = ["model", "configuration"]


class OutputLengthHistograms(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(description="Snapshot the row was read from.")
    task: Series[str] = pa.Field(description="Task of the detail file.")
    model_id: Series[str] = pa.Field(description="Model of the detail file.")
    scope: Series[str] = pa.Field(isin=SCOPES, description="model: the file's aggregate; configuration: one configuration's.")
    detail_ordinal: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=0, description="The configuration's detail_ordinal; null for the model aggregate."
    )
    bin_index: Series[pd.Int64Dtype] = pa.Field(ge=0, description="0-based bin position.")
    lower_edge: Series[float] = pa.Field(description="Bin's lower edge, output tokens.")
    upper_edge: Series[float] = pa.Field(description="Bin's upper edge, output tokens.")
    count: Series[pd.Int64Dtype] = pa.Field(ge=0, description="Requests whose output length fell in the bin.")

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task", "model_id", "scope", "detail_ordinal", "bin_index"]

    @pa.dataframe_check(error="lower_edge < upper_edge")
    def edges_increase(cls, df: pd.DataFrame) -> Series[bool]:
        return (df.lower_edge < df.upper_edge).astype(bool)
