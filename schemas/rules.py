"""Facts and row rules shared by more than one schema. Imports nothing heavy: fetch reads it too."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Rated board power (TDP) per GPU, watts: NVIDIA's H100 SXM5 and B200 (HGX) data sheets.
# A GPU missing here passes the power rule with a warning rather than failing the build.
RATED_BOARD_POWER_W = {"H100": 700.0, "B200": 1000.0}

# The slug (the part of model_id after the last "/", lower-cased) names an exported file, so both
# parts of the id are limited to characters that are safe in a file name on every platform.
MODEL_ID_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,199}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
MODEL_ID_ERROR = "model_id must give a safe file name (slug = part after the last '/')"
POWER_ERROR = "avg_power_watts <= num_gpus × rated board power of gpu_model"
GPU_KNOWN_ERROR = "gpu_model has a known rated board power"


def model_id_is_safe(model_id: pd.Series) -> pd.Series:
    return model_id.str.fullmatch(MODEL_ID_PATTERN).fillna(False).astype(bool)


def power_within_rating(df: pd.DataFrame) -> pd.Series:
    rated = df.gpu_model.map(RATED_BOARD_POWER_W).astype("float64")
    unknown = rated.isna() | df.avg_power_watts.isna()
    return (unknown | (df.avg_power_watts <= df.num_gpus * rated)).fillna(True).astype(bool)


def gpu_power_rating_known(df: pd.DataFrame) -> pd.Series:
    return df.gpu_model.isin(list(RATED_BOARD_POWER_W))
