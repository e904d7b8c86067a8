-- snapshot_history: the ingested snapshots in upstream commit order, each with its predecessor.
-- grain: one row per snapshot
-- key: (snapshot_id)
-- inputs: snapshots
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

comment on view snapshot_history is 'The ingested snapshots in upstream commit order (retrieval date where the commit is unknown).';
comment on column snapshot_history.ordered_at is 'Commit time, or the retrieval date where unknown: what orders the history.';
comment on column snapshot_history.position is '1 for the oldest snapshot.';
comment on column snapshot_history.previous_snapshot_id is 'The snapshot before this one in the history; null for the first.';
