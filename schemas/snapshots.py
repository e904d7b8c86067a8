"""snapshots: one row per fetched upstream snapshot, from its fetch manifest."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
DATE = {"stored_as": "date"}


class Snapshots(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(
        str_matches=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    source: Series[str] = pa.Field()
    retrieved: Series[str] = pa.Field(str_matches=DATE_PATTERN, metadata=DATE)
    commit: Series[str] = pa.Field(nullable=True, str_matches=r"^[0-9a-f]{7,40}$")
    commit_time: Series[str] = pa.Field(nullable=True, metadata={"stored_as": "timestamptz"})
    commit_subject: Series[str] = pa.Field(nullable=True)
    tasks_last_commit_date: Series[str] = pa.Field(
        nullable=True, str_matches=DATE_PATTERN, metadata=DATE
    )
    last_updated: Series[str] = pa.Field(str_matches=DATE_PATTERN, metadata=DATE)
    file_count: Series[pd.Int64Dtype] = pa.Field(ge=1)
    total_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0)

    # Stored as Parquet dates and timestamps (metadata stored_as), so they must be real ones.
    @pa.check("retrieved", "tasks_last_commit_date", "last_updated", error="a real calendar date, YYYY-MM-DD")
    def calendar_date(cls, dates: Series[str]) -> Series[bool]:
        return pd.to_datetime(dates, format="%Y-%m-%d", errors="coerce").notna() | dates.isna()

    @pa.check("commit_time", error="an ISO 8601 time")
    def iso_8601_time(cls, times: Series[str]) -> Series[bool]:
        return pd.to_datetime(times, format="ISO8601", utc=True, errors="coerce").notna() | times.isna()

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id"]
