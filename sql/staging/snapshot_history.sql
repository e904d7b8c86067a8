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
        -- sorts by the day it was retrieved.
        coalesce(try_cast(commit_time as timestamptz), retrieved::timestamptz) as ordered_at,
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
