"""diffusion_configurations: one row per entry of each diffusion task file (text-to-image,
text-to-video), every upstream field kept.

Key: (snapshot_id, task, source_ordinal); a measured configuration is CONFIGURATION_KEY plus repeat.
"""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.task_file_entries import TaskFileEntry

# Everything that defines what was measured; rows sharing all of it are repeats.
CONFIGURATION_KEY = [
    "task",
    "model_id",
    "gpu_model",
    "num_gpus",
    "batch_size",
    "image_height",
    "image_width",
    "video_height",
    "video_width",
    "num_frames",
    "fps",
    "inference_steps",
    "ulysses_degree",
    "ring_degree",
]
# Energy per output should equal average power × batch latency ÷ batch size; it does to 1e-15 in all
# eleven real snapshots. ±25 % rejects a unit or field mix-up while allowing a different averaging window.
ENERGY_IDENTITY_TOLERANCE = 0.25


class DiffusionConfigurations(TaskFileEntry):
    weight_precision: Series[str] = pa.Field(
        nullable=True,
        metadata={"upstream": "optional"},
    )
    ulysses_degree: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    ring_degree: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    batch_size: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    inference_steps: Series[pd.Int64Dtype] = pa.Field(ge=1, metadata={"upstream": "required"})
    image_height: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    image_width: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    video_height: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    video_width: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    num_frames: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    fps: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, metadata={"upstream": "optional"})
    batch_latency_s: Series[float] = pa.Field(gt=0, metadata={"upstream": "required"})
    energy_per_image_joules: Series[float] = pa.Field(nullable=True, gt=0, metadata={"upstream": "optional"})
    energy_per_video_joules: Series[float] = pa.Field(nullable=True, gt=0, metadata={"upstream": "optional"})
    throughput_images_per_sec: Series[float] = pa.Field(nullable=True, gt=0, metadata={"upstream": "optional"})
    throughput_videos_per_sec: Series[float] = pa.Field(nullable=True, gt=0, metadata={"upstream": "optional"})

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id", "task", "source_ordinal"]

    @pa.dataframe_check(error="exactly one of energy_per_image_joules, energy_per_video_joules")
    def one_energy_per_output(cls, df: pd.DataFrame) -> Series[bool]:
        return (df.energy_per_image_joules.notna() != df.energy_per_video_joules.notna()).astype(bool)

    @pa.dataframe_check(
        error="energy_per_image_joules or energy_per_video_joules within ±25 % of "
        "avg_power_watts × batch_latency_s ÷ batch_size"
    )
    def energy_matches_power_and_latency(cls, df: pd.DataFrame) -> Series[bool]:
        energy = df.energy_per_image_joules.fillna(df.energy_per_video_joules)
        implied = df.avg_power_watts * df.batch_latency_s / df.batch_size
        return ((energy / implied - 1).abs() <= ENERGY_IDENTITY_TOLERANCE).fillna(True).astype(bool)

    @pa.dataframe_check(error="num_gpus divisible by ulysses_degree × ring_degree")
    def gpus_cover_parallelism(cls, df: pd.DataFrame) -> Series[bool]:
        return (df.num_gpus % (df.ulysses_degree * df.ring_degree) == 0).astype(bool)
