-- task_summaries: per-task counts the index's provenance block cites.
-- grain: one row per token task of the index snapshot
-- key: (snapshot_id, task)
-- inputs: configurations
create or replace view task_summaries as

with

counted as (
    select
        snapshot_id,
        task,
        count(*) as configuration_count,
        count(*) filter (where not under_itl_deadline) as over_itl_deadline_count,
        max(median_itl_ms) as max_median_itl_ms,
    from configurations
    group by snapshot_id, task
)

select * from counted;

comment on view task_summaries is 'Per snapshot × token task: how many configurations its file has and how many exceed the ITL deadline.';
comment on column task_summaries.configuration_count is 'Entries in the task file.';
comment on column task_summaries.over_itl_deadline_count is 'Configurations whose median ITL exceeds the deadline.';
comment on column task_summaries.max_median_itl_ms is 'The slowest median ITL among the configurations, ms.';
