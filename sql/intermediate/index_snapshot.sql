-- index_snapshot: the snapshot the index and the current-snapshot views are built from.
-- grain: one row
-- key: (snapshot_id)
create or replace view index_snapshot as

with

requested as (
    select snapshot_id from build_parameters
),

newest as (
    select snapshot_id from snapshot_history
    order by position desc
    limit 1
),

chosen as (
    select coalesce((select snapshot_id from requested), (select snapshot_id from newest)) as snapshot_id
)

select * from chosen;
