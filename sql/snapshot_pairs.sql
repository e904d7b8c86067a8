-- snapshot_pairs: every ordered pair of ingested snapshots, older first, for comparisons.
-- grain: one row per (older, newer) pair
-- key: (older_snapshot_id, newer_snapshot_id)
-- inputs: snapshot_history
create or replace view snapshot_pairs as

with

history as (
    select snapshot_id, position from snapshot_history
),

pairs as (
    select
        older.snapshot_id as older_snapshot_id,
        newer.snapshot_id as newer_snapshot_id,
        newer.position = older.position + 1 as is_consecutive,
    from history as older
    join history as newer on newer.position > older.position
)

select * from pairs;
