-- index_changes: the index rows each snapshot changed relative to the one before it.
-- grain: one row per consecutive pair × task × model × GPU whose index row differs
-- key: (newer_snapshot_id, task, model_id, gpu)
-- inputs: index_diffs
create or replace view index_changes as

with

consecutive as (
    select * exclude (is_consecutive)
    from index_diffs
    where is_consecutive
)

select * from consecutive;
