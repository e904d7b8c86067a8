-- fleet_plan: table macro; how many GPUs of each kind serve a daily volume of a model within a latency
-- limit, and what they draw: select * from fleet_plan('lm-arena-chat', 'Qwen/Qwen3-8B', 1e9, 'p90_itl_ms', 100).
-- grain: one row per model × GPU the index snapshot measured for the task × boundary (gpu_only, server, facility)
-- key: model_id, gpu, boundary
-- The rows are fleet_plan_unchecked's (the method is stated there and in docs/planning.md) once the
-- question is checked: a task, model or GPU the index snapshot does not have, or a latency metric not of
-- the task's family, is an error naming it and the nearest names, not an empty answer. A null model
-- plans every model of the task.
create or replace macro fleet_plan(
    task_name, model, outputs_per_day, latency_metric_name, latency_limit,
    gpu_name := null, requests_per_second := null, carbon_intensity := null
) as table

with
-- Each name checked once (each check reads the index snapshot's names).
asked as materialized (
    select
        checked_index_name('task', task_name) as asked_task,
        checked_index_name('model', model) as asked_model,
        checked_index_name('GPU', gpu_name) as asked_gpu
),

-- The latency metrics of the task's family: the family of the task's configurations in the index
-- snapshot, read from their two tables as checked_index_name reads the names (unified_configurations
-- here would be planned a second time, a third again of what the plan costs).
metric as materialized (
    select checked_name('latency metric', latency_metric_name, (
        select list(m.latency_metric order by m.metric_order)
        from latency_metrics as m
        where m.family = (
            select any_value(c.family)
            from (
                select 'token' as family, snapshot_id, task from token_configurations
                union all
                select 'diffusion' as family, snapshot_id, task from diffusion_configurations
            ) as c, asked
            where c.task = asked.asked_task and c.snapshot_id in (select snapshot_id from index_snapshot)
        )
    )) as asked_metric
)

select *
from fleet_plan_unchecked(
    (select asked_task from asked), (select asked_model from asked), outputs_per_day,
    (select asked_metric from metric), latency_limit, gpu_name := (select asked_gpu from asked),
    requests_per_second := requests_per_second, carbon_intensity := carbon_intensity
);
