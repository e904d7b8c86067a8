-- task_summaries: per-task counts the index's provenance block cites.
-- grain: one row per task of the index snapshot
-- key: (task)
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
