-- configuration_changes: what each snapshot changed relative to the one before it.
-- grain: one row per consecutive pair × configuration added or removed, or × changed field
-- key: (newer_snapshot_id, task, model_id, configuration, repeat, field)
-- inputs: configuration_diffs
create or replace view configuration_changes as

with

consecutive as (
    select * exclude (is_consecutive)
    from configuration_diffs
    where is_consecutive
)

select * from consecutive;
