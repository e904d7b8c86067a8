-- energy_latency_frontier: the index snapshot's configurations worth considering: those no other
-- configuration beats on both energy per output and a latency metric, per task and model across GPUs
-- (scope 'model') and per task, model and GPU (scope 'model_gpu'), for each latency metric.
-- grain: one row per scope × latency metric × configuration on that frontier
-- key: (scope, task, model_id, gpu_scope, latency_metric, row_id, repeat)
-- inputs: configurations, diffusion_configurations_current
-- A configuration is dominated when another of the same group has energy and latency each no higher
-- and one of them lower; equal points both stay. gpu_scope is the GPU for scope model_gpu, 'all' for model.
create or replace view energy_latency_frontier as

with

token_points as (
    select snapshot_id, task, model_id, slug, gpu, num_gpus, row_id, repeat, 'token' as family,
           'million output tokens' as unit_label, wh_per_million_output_tokens as wh_per_unit,
           metric.latency_metric, metric.latency,
    from (
        select *, unnest([
            {'latency_metric': 'median_itl_ms', 'latency': median_itl_ms},
            {'latency_metric': 'p90_itl_ms', 'latency': p90_itl_ms},
            {'latency_metric': 'p99_itl_ms', 'latency': p99_itl_ms}
        ]) as metric,
        from configurations
    )
),

diffusion_points as (
    select snapshot_id, task, model_id, slug, gpu, num_gpus, row_id, repeat, 'diffusion' as family,
           unit as unit_label, wh_per_output as wh_per_unit,
           'batch_latency_s' as latency_metric, batch_latency_s as latency,
    from diffusion_configurations_current
),

points as (
    select * from token_points
    union all
    select * from diffusion_points
),

scoped as (
    select 'model' as scope, 'all' as gpu_scope, * from points
    union all
    select 'model_gpu' as scope, gpu as gpu_scope, * from points
),

frontier as (
    select p.*
    from scoped as p
    where not exists (
        select 1 from scoped as o
        where o.scope = p.scope and o.task = p.task and o.model_id = p.model_id and o.gpu_scope = p.gpu_scope
            and o.latency_metric = p.latency_metric
            and o.wh_per_unit <= p.wh_per_unit and o.latency <= p.latency
            and (o.wh_per_unit < p.wh_per_unit or o.latency < p.latency)
    )
)

select * from frontier;
