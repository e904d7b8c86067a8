-- tiered_best_configurations: per latency tier, the index snapshot's lowest-energy configuration of each
-- model on each GPU whose latency metric is within the tier's limit (tiers: the latency_tiers table),
-- ties broken as in best_configurations (unified_configurations' preference). The limit is
-- latency_limit_ms for an ITL metric (token tasks), latency_limit_s for batch latency (diffusion).
-- grain: one row per task × model × GPU × latency metric × limit that has a configuration within the limit
-- key: task, model_id, gpu, latency_metric, latency_limit_ms, latency_limit_s
-- null in key: latency_limit_ms, latency_limit_s
create or replace view tiered_best_configurations as

with
ranked as (
    select
        c.*,
        t.latency_limit_ms,
        t.latency_limit_s,
        row_number() over (
            partition by c.task, c.model_id, c.gpu, c.latency_metric, t.latency_limit_ms, t.latency_limit_s
            order by c.preference
        ) as rank_within_tier
    from configuration_latencies as c
    join latency_tiers as t
        on t.family = c.family and t.latency_metric = c.latency_metric and (t.task is null or t.task = c.task)
    where c.in_index_snapshot and (c.latency_ms <= t.latency_limit_ms or c.latency_s <= t.latency_limit_s)
)

select
    snapshot_id, task, model_id, slug, gpu, latency_metric,
    latency_limit_ms, latency_limit_s,
    row_id, repeat, num_gpus, batch_limit,
    wh_per_unit, unit_label, median_itl_ms, p90_itl_ms, p99_itl_ms, batch_latency_s
from ranked
where rank_within_tier = 1;
