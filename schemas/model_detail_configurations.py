"""model_detail_configurations: one row per configuration in a per-model detail file, its nested
parallelization flattened into columns. The view model_detail_matches pairs each with its task-file row.

Key: (snapshot_id, task, model_id, detail_ordinal).
"""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import rules


def _optional(path: str | None = None, **checks: object) -> object:
    metadata = {"upstream": "optional", **({"json_path": path} if path else {})}
    return pa.Field(nullable=True, metadata=metadata, **checks)


class ModelDetailConfigurations(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field()
    task: Series[str] = pa.Field()
    model_id: Series[str] = pa.Field()
    detail_ordinal: Series[pd.Int64Dtype] = pa.Field(ge=0)
    repeat: Series[pd.Int64Dtype] = pa.Field(ge=1)
    gpu_model: Series[str] = pa.Field(metadata={"upstream": "required"})
    num_gpus: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    avg_power_watts: Series[float] = _optional(gt=0)
    # Token tasks
    max_num_seqs: Series[pd.Int64Dtype] = _optional(ge=1)
    max_num_batched_tokens: Series[pd.Int64Dtype] = _optional(ge=1)
    tensor_parallel: Series[pd.Int64Dtype] = _optional("parallelization.tensor_parallel", ge=0)
    data_parallel: Series[pd.Int64Dtype] = _optional("parallelization.data_parallel", ge=0)
    expert_parallel: Series[pd.Int64Dtype] = _optional("parallelization.expert_parallel", ge=0)
    parallelization_notes: Series[str] = _optional("parallelization.notes")
    avg_batch_size: Series[float] = _optional(gt=0)
    avg_output_len: Series[float] = _optional(gt=0)
    energy_per_token_joules: Series[float] = _optional(gt=0)
    energy_per_request_joules: Series[float] = _optional(gt=0)
    median_itl_ms: Series[float] = _optional(gt=0)
    p90_itl_ms: Series[float] = _optional(gt=0)
    p95_itl_ms: Series[float] = _optional(gt=0)
    p99_itl_ms: Series[float] = _optional(gt=0)
    output_throughput_tokens_per_sec: Series[float] = _optional(gt=0)
    kv_cache_usage_percent: Series[float] = _optional(ge=0, le=100)
    # Diffusion tasks
    ulysses_degree: Series[pd.Int64Dtype] = _optional("parallelization.ulysses_degree", ge=1)
    ring_degree: Series[pd.Int64Dtype] = _optional("parallelization.ring_degree", ge=1)
    batch_size: Series[pd.Int64Dtype] = _optional(ge=1)
    inference_steps: Series[pd.Int64Dtype] = _optional(ge=1)
    image_height: Series[pd.Int64Dtype] = _optional(ge=1)
    image_width: Series[pd.Int64Dtype] = _optional(ge=1)
    video_height: Series[pd.Int64Dtype] = _optional(ge=1)
    video_width: Series[pd.Int64Dtype] = _optional(ge=1)
    num_frames: Series[pd.Int64Dtype] = _optional(ge=1)
    fps: Series[pd.Int64Dtype] = _optional(ge=1)
    batch_latency_s: Series[float] = _optional(gt=0)
    energy_per_image_joules: Series[float] = _optional(gt=0)
    energy_per_video_joules: Series[float] = _optional(gt=0)
    throughput_images_per_sec: Series[float] = _optional(gt=0)
    throughput_videos_per_sec: Series[float] = _optional(gt=0)
    extra_fields: Series[str] = pa.Field(
        nullable=True,
    )

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task", "model_id", "detail_ordinal"]

    @pa.dataframe_check(error=rules.POWER_ERROR)
    def power_within_rating(cls, df: pd.DataFrame) -> Series[bool]:
        return rules.power_within_rating(df)
