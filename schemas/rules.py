"""The checks the field dictionary names (dictionary.toml: a column's `checks`, a table's
`row_checks`) that pandera's built-in checks cannot state, and the facts they rest on. Imports nothing
heavy: fetch and build read the facts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Rated board power (TDP) per GPU, watts: NVIDIA's H100 SXM5 and B200 (HGX) data sheets.
# A GPU missing here passes the power rule with a warning rather than failing the build.
RATED_BOARD_POWER_W = {"H100": 700.0, "B200": 1000.0}

# The slug (the part of model_id after the last "/", lower-cased) names an exported file, so both
# parts of the id are limited to characters that are safe in a file name on every platform.
MODEL_ID_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,199}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"

# A GPU name becomes part of row_id (and of every path or key built from it), so it is limited to what
# a GPU model is called: letters and digits, with inner spaces, dots, underscores and hyphens.
GPU_NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,62}[A-Za-z0-9])?$"

# Energy per output should equal average power × batch latency ÷ batch size; it does to 1e-15 in all
# eleven real snapshots. ±25 % rejects a unit or field mix-up while allowing a different averaging window.
ENERGY_IDENTITY_TOLERANCE = 0.25


@dataclass(frozen=True)
class Rule:
    """A check: what it demands (pandera's error text, shown with each failing row) and its test."""

    error: str
    test: Callable[..., pd.Series]
    warning: bool = False  # reported, but does not fail the build


def _parallel_gpus(df: pd.DataFrame) -> pd.Series:
    """The upstream spelled a degree 'not set' as 0 before 2025-12-15; not set means a degree of 1."""
    return df.tensor_parallel.where(df.tensor_parallel != 0, 1) * df.data_parallel.where(df.data_parallel != 0, 1)


def _calendar_date(dates: pd.Series) -> pd.Series:
    import pandas as pd

    written = dates.str.fullmatch(r"\d{4}-\d{2}-\d{2}").fillna(False).astype(bool)  # strptime takes 2025-1-5
    return (written & pd.to_datetime(dates, format="%Y-%m-%d", errors="coerce").notna()) | dates.isna()


def _iso_8601_time(times: pd.Series) -> pd.Series:
    import pandas as pd

    return pd.to_datetime(times, format="ISO8601", utc=True, errors="coerce").notna() | times.isna()


def _power_within_rating(df: pd.DataFrame) -> pd.Series:
    rated = df.gpu_model.map(RATED_BOARD_POWER_W).astype("float64")
    unknown = rated.isna() | df.avg_power_watts.isna()
    return (unknown | (df.avg_power_watts <= df.num_gpus * rated)).fillna(True).astype(bool)


def _energy_matches_power_and_latency(df: pd.DataFrame) -> pd.Series:
    energy = df.energy_per_image_joules.fillna(df.energy_per_video_joules)
    implied = df.avg_power_watts * df.batch_latency_s / df.batch_size
    return ((energy / implied - 1).abs() <= ENERGY_IDENTITY_TOLERANCE).fillna(True).astype(bool)


def _file_name_matches(df: pd.DataFrame) -> pd.Series:
    expected = df.model_id.str.replace("/", "__", regex=False) + "__" + df.task + ".json"
    return (df.file_name == expected).astype(bool)


COLUMN_CHECKS = {
    "model_id_is_safe": Rule(
        "model_id must give a safe file name (slug = part after the last '/')",
        lambda model_id: model_id.str.fullmatch(MODEL_ID_PATTERN).fillna(False).astype(bool),
    ),
    "gpu_name_is_safe": Rule(
        "gpu_model must be a GPU name: letters and digits, with spaces, '.', '_' or '-' between them",
        lambda gpu: gpu.str.fullmatch(GPU_NAME_PATTERN).fillna(False).astype(bool),
    ),
    # Text stored as Parquet dates and timestamps (schemas/types.py date, timestamptz), so they must be real ones.
    "calendar_date": Rule("a real calendar date, YYYY-MM-DD", _calendar_date),
    "iso_8601_time": Rule("an ISO 8601 time", _iso_8601_time),
}

ROW_CHECKS = {
    "itl_percentiles_ordered": Rule(
        "median_itl_ms <= p90_itl_ms <= p95_itl_ms <= p99_itl_ms",
        lambda df: (df.median_itl_ms <= df.p90_itl_ms) & (df.p90_itl_ms <= df.p95_itl_ms)
        & (df.p95_itl_ms <= df.p99_itl_ms),
    ),
    "batch_within_cap": Rule("avg_batch_size <= max_num_seqs", lambda df: df.avg_batch_size <= df.max_num_seqs),
    "token_gpus_cover_parallelism": Rule(
        "num_gpus divisible by tensor_parallel × data_parallel",
        lambda df: (df.num_gpus % _parallel_gpus(df) == 0).astype(bool),
    ),
    "diffusion_gpus_cover_parallelism": Rule(
        "num_gpus divisible by ulysses_degree × ring_degree",
        lambda df: (df.num_gpus % (df.ulysses_degree * df.ring_degree) == 0).astype(bool),
    ),
    "one_energy_per_output": Rule(
        "exactly one of energy_per_image_joules, energy_per_video_joules",
        lambda df: (df.energy_per_image_joules.notna() != df.energy_per_video_joules.notna()).astype(bool),
    ),
    "energy_matches_power_and_latency": Rule(
        "energy_per_image_joules or energy_per_video_joules within ±25 % of "
        "avg_power_watts × batch_latency_s ÷ batch_size",
        _energy_matches_power_and_latency,
    ),
    "power_within_rating": Rule("avg_power_watts <= num_gpus × rated board power of gpu_model", _power_within_rating),
    "gpu_power_rating_known": Rule(
        "gpu_model has a known rated board power", lambda df: df.gpu_model.isin(list(RATED_BOARD_POWER_W)), warning=True
    ),
    "file_name_matches_contents": Rule("file_name is <model_id with / as __>__<task>.json", _file_name_matches),
    "edges_increase": Rule("lower_edge < upper_edge", lambda df: (df.lower_edge < df.upper_edge).astype(bool)),
}
