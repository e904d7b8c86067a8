-- snapshot_history: the ingested snapshots in upstream commit order, each with its predecessor.
-- grain: one row per snapshot
-- key: snapshot_id
create or replace view snapshot_history as

with
ingested as (
    select * from snapshots
),

ordered as (
    select
        ingested.*,
        -- Commit time orders snapshots as the upstream made them; a snapshot without commit facts
        -- sorts by midnight UTC of the day it was retrieved, as its Parquet files' snapshot_ordered_at.
        -- Spelled with its offset: a date cast to timestamptz is midnight in the session's time zone
        -- (DuckDB 1.2 onwards; 1.1 took UTC), so the order would depend on who reads it.
        coalesce(try_cast(commit_time as timestamptz),
                 cast(cast(retrieved as varchar) || ' 00:00:00+00' as timestamptz)) as ordered_at,
    from ingested
),

positioned as (
    select
        ordered.*,
        row_number() over (order by ordered_at, snapshot_id) as position,
        lag(snapshot_id) over (order by ordered_at, snapshot_id) as previous_snapshot_id,
    from ordered
)

select * from positioned;
