-- tiered_best_configurations: per latency tier, the index snapshot's lowest-energy configuration of each
-- model on each GPU whose latency metric is within the tier's limit (tiers: the latency_tiers table).
-- grain: one row per task × model × GPU × latency metric × limit that has a configuration within the limit
-- key: (task, model_id, gpu, latency_metric, latency_limit)
-- Ties as in best_configurations: fewer GPUs, then the smaller batch, then the earlier repeat (and,
-- for diffusion, the earlier entry in the task file). A model and GPU with nothing within a tier has
-- no row for it.
create or replace view tiered_best_configurations as

with

token_candidates as (
    select
        c.snapshot_id, c.task, c.model_id, c.slug, c.gpu, t.latency_metric, t.latency_limit,
        c.row_id, c.repeat, c.num_gpus, c.max_num_seqs as batch_limit, c.source_ordinal,
        c.joules_per_output_token as joules_per_unit, c.wh_per_million_output_tokens as wh_per_unit,
        'million output tokens' as unit_label,
        c.median_itl_ms, c.p90_itl_ms, c.p99_itl_ms, null::double as batch_latency_s,
        case t.latency_metric
            when 'median_itl_ms' then c.median_itl_ms
            when 'p90_itl_ms' then c.p90_itl_ms
            when 'p99_itl_ms' then c.p99_itl_ms
        end as latency,
    from configurations as c
    join latency_tiers as t on t.family = 'token'
),

diffusion_candidates as (
    select
        d.snapshot_id, d.task, d.model_id, d.slug, d.gpu, t.latency_metric, t.latency_limit,
        d.row_id, d.repeat, d.num_gpus, d.batch_size as batch_limit, d.source_ordinal,
        d.joules_per_output as joules_per_unit, d.wh_per_output as wh_per_unit, d.unit as unit_label,
        null::double as median_itl_ms, null::double as p90_itl_ms, null::double as p99_itl_ms, d.batch_latency_s,
        d.batch_latency_s as latency,
    from diffusion_configurations_current as d
    join latency_tiers as t on t.family = 'diffusion' and t.task = d.task and t.latency_metric = 'batch_latency_s'
),

within_limit as (
    select * from token_candidates where latency <= latency_limit
    union all
    select * from diffusion_candidates where latency <= latency_limit
),

ranked as (
    select
        within_limit.*,
        row_number() over (
            partition by snapshot_id, task, model_id, gpu, latency_metric, latency_limit
            order by joules_per_unit, num_gpus, batch_limit, repeat, source_ordinal
        ) as rank_within_tier,
    from within_limit
)

select * exclude (rank_within_tier, latency, source_ordinal, joules_per_unit) from ranked where rank_within_tier = 1;
