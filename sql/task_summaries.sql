-- task_summaries: per-task counts the index's provenance block cites.
-- grain: one row per task of the index snapshot
-- key: (task)
-- inputs: configurations, diffusion_configurations_current
create or replace view task_summaries as

with

token_counts as (
    select
        snapshot_id,
        task,
        'token' as family,
        count(*) as configuration_count,
        count(*) filter (where not under_itl_deadline) as over_latency_limit_count,
    from configurations
    group by snapshot_id, task
),

diffusion_counts as (
    select
        snapshot_id,
        task,
        'diffusion' as family,
        count(*) as configuration_count,
        count(*) filter (where not under_latency_ceiling) as over_latency_limit_count,
    from diffusion_configurations_current
    group by snapshot_id, task
),

counted as (
    select * from token_counts
    union all
    select * from diffusion_counts
)

select * from counted;

comment on view task_summaries is 'Per task of the index snapshot: how many configurations its file has and how many exceed the latency limit (ITL deadline or batch-latency ceiling).';
comment on column task_summaries.family is 'token or diffusion.';
comment on column task_summaries.configuration_count is 'Entries in the task file.';
comment on column task_summaries.over_latency_limit_count is 'Configurations over the ITL deadline (token) or the batch-latency ceiling (diffusion).';
