-- energy_latency_frontier: the index snapshot's configurations worth considering: those no other
-- configuration beats on both energy per output and a latency metric, per task and model across GPUs
-- (scope 'model') and per task, model and GPU (scope 'model_gpu'), for each latency metric.
-- grain: one row per scope × latency metric × configuration on that frontier
-- key: (scope, task, model_id, gpu_scope, latency_metric, row_id)
-- Each configuration is one point, its repeats averaged (configuration_points), so one lucky repeat
-- cannot put a configuration on the frontier; the repeats' spread is carried beside the mean. A
-- configuration is dominated when another of the same group has energy and latency each no higher
-- and one of them lower; equal points both stay. gpu_scope is the GPU for scope model_gpu, 'all' for model.
create or replace view energy_latency_frontier as

with

metric_points as (
    select
        p.snapshot_id, p.task, p.model_id, p.slug, p.gpu, p.num_gpus, p.row_id, p.n_repeats, p.family, p.unit_label,
        p.wh_per_unit, p.wh_per_unit_min, p.wh_per_unit_max, m.latency_metric,
        case m.latency_metric
            when 'median_itl_ms' then p.median_itl_ms
            when 'p90_itl_ms' then p.p90_itl_ms
            when 'p99_itl_ms' then p.p99_itl_ms
            else p.batch_latency_s
        end as latency
    from configuration_points as p
    join (
        values ('token', 'median_itl_ms'), ('token', 'p90_itl_ms'), ('token', 'p99_itl_ms'),
            ('diffusion', 'batch_latency_s')
    ) as m (family, latency_metric) on m.family = p.family
),

scoped as (
    select 'model' as scope, 'all' as gpu_scope, metric_points.* from metric_points
    union all
    select 'model_gpu' as scope, gpu as gpu_scope, metric_points.* from metric_points
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
