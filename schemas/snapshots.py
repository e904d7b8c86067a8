"""snapshots: one row per fetched upstream snapshot, from its fetch manifest."""

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"


class Snapshots(pa.DataFrameModel):
    snapshot_id: Series[str] = pa.Field(
        str_matches=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Snapshot identifier: <commit date>-<short commit> when the commit is known.",
    )
    source: Series[str] = pa.Field(description="Where the snapshot was fetched from: a local path or a URL.")
    retrieved: Series[str] = pa.Field(
        str_matches=DATE_PATTERN, description="Date (UTC) the fetch first retrieved this content."
    )
    commit: Series[str] = pa.Field(
        nullable=True, str_matches=r"^[0-9a-f]{7,40}$", description="Upstream git commit, when known."
    )
    commit_time: Series[str] = pa.Field(nullable=True, description="Upstream commit time (ISO 8601), when known.")
    commit_subject: Series[str] = pa.Field(nullable=True, description="Upstream commit subject line, when known.")
    tasks_last_commit_date: Series[str] = pa.Field(
        nullable=True,
        str_matches=DATE_PATTERN,
        description="Date of the last upstream commit that touched the task files, when known.",
    )
    last_updated: Series[str] = pa.Field(
        str_matches=DATE_PATTERN, description="index.json last_updated: the upstream's compile date."
    )
    file_count: Series[pd.Int64Dtype] = pa.Field(ge=1, description="Number of upstream files in the snapshot.")
    total_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0, description="Total size of the upstream files in bytes.")

    class Config:
        strict = True
        coerce = True
        unique = ["snapshot_id"]
