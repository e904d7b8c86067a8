-- energy_latency_frontier: the index snapshot's configurations worth considering: those no other
-- configuration beats on both energy per output and a latency metric, per task and model across GPUs
-- (scope 'model') and per task, model and GPU (scope 'model_gpu'), for each latency metric.
-- grain: one row per scope × latency metric × configuration on that frontier
-- key: scope, task, model_id, gpu_scope, latency_metric, row_id
-- Each configuration is one point, its repeats averaged (as in configuration_points), so one lucky
-- repeat cannot put a configuration on the frontier; the repeats' spread is carried beside the mean. A
-- configuration is dominated when another of the same group has energy and latency each no higher
-- and one of them lower; equal points both stay. gpu_scope is the GPU for scope model_gpu, 'all' for model.
create or replace view energy_latency_frontier as

with
metric_points as (
    select
        snapshot_id, task, model_id, slug, gpu, num_gpus, row_id, count(*) as n_repeats, family, unit_label,
        avg(wh_per_unit) as wh_per_unit, min(wh_per_unit) as wh_per_unit_min, max(wh_per_unit) as wh_per_unit_max,
        latency_metric, avg(latency) as latency
    from configuration_latencies
    where in_index_snapshot
    group by snapshot_id, task, model_id, slug, gpu, num_gpus, row_id, family, unit_label, latency_metric
),

scoped as (
    select 'model' as scope, 'all' as gpu_scope, metric_points.* from metric_points
    union all
    select 'model_gpu' as scope, gpu as gpu_scope, metric_points.* from metric_points
)

select p.*
from scoped as p
where not exists (
    select 1 from scoped as o
    where o.scope = p.scope and o.task = p.task and o.model_id = p.model_id and o.gpu_scope = p.gpu_scope
        and o.latency_metric = p.latency_metric
        and o.wh_per_unit <= p.wh_per_unit and o.latency <= p.latency
        and (o.wh_per_unit < p.wh_per_unit or o.latency < p.latency)
);
