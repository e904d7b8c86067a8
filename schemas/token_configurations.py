"""token_configurations: one row per entry of each token task file (gpqa, lm-arena-chat,
sourcegraph-fim, image-chat, video-chat), every upstream field kept.

Key: (snapshot_id, task, model_id, gpu_model, num_gpus, max_num_seqs, repeat).
"""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.task_file_entries import TaskFileEntry


KEY = ["snapshot_id", "task", "model_id", "gpu_model", "num_gpus", "max_num_seqs", "repeat"]
# The repeat ordinal counts rows sharing the measured configuration's key (the key less repeat).
CONFIGURATION_KEY = ["task", "model_id", "gpu_model", "num_gpus", "max_num_seqs"]


def _parallel_degree(degree: pd.Series) -> pd.Series:
    """The upstream spelled 'not set' as 0 before 2025-12-15; not set means a degree of 1."""
    return degree.where(degree != 0, 1)


class TokenConfigurations(TaskFileEntry):
    architecture: Series[str] = pa.Field(nullable=True, metadata={"upstream": "optional"})
    weight_precision: Series[str] = pa.Field(str_length={"min_value": 1}, metadata={"upstream": "required"})
    tensor_parallel: Series[pd.Int64Dtype] = pa.Field(ge=0, metadata={"upstream": "required"})
    data_parallel: Series[pd.Int64Dtype] = pa.Field(ge=0, metadata={"upstream": "required"})
    expert_parallel: Series[pd.Int64Dtype] = pa.Field(ge=0, metadata={"upstream": "required"})
    max_num_seqs: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    max_num_batched_tokens: Series[pd.Int64Dtype] = pa.Field(
        nullable=True,
        ge=1,
        metadata={"upstream": "optional"},
    )
    avg_batch_size: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    avg_output_len: Series[float] = pa.Field(
        gt=0,
        metadata={"upstream": "optional"},
    )
    is_avg_output_len_derived: Series[bool] = pa.Field()
    energy_per_token_joules: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    energy_per_request_joules: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    median_itl_ms: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    p90_itl_ms: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    p95_itl_ms: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    p99_itl_ms: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    output_throughput_tokens_per_sec: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})

    class Config:
        strict = True
        coerce = True
        unique = KEY

    @pa.dataframe_check(error="median_itl_ms <= p90_itl_ms <= p95_itl_ms <= p99_itl_ms")
    def itl_percentiles_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        return (df.median_itl_ms <= df.p90_itl_ms) & (df.p90_itl_ms <= df.p95_itl_ms) & (df.p95_itl_ms <= df.p99_itl_ms)

    @pa.dataframe_check(error="avg_batch_size <= max_num_seqs")
    def batch_within_cap(cls, df: pd.DataFrame) -> Series[bool]:
        return df.avg_batch_size <= df.max_num_seqs

    @pa.dataframe_check(error="num_gpus divisible by tensor_parallel × data_parallel")
    def gpus_cover_parallelism(cls, df: pd.DataFrame) -> Series[bool]:
        degree = _parallel_degree(df.tensor_parallel) * _parallel_degree(df.data_parallel)
        return (df.num_gpus % degree == 0).astype(bool)
