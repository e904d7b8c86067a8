-- configuration_points: the index snapshot's configurations, token and diffusion alike, each as one
-- measured point: its repeats merged into their mean, with the lowest and highest repeat beside it.
-- grain: one row per task × configuration (row_id) of the index snapshot
-- key: (task, row_id)
-- A repeat is a second measurement of the same configuration in one task file. The frontier and
-- energy_at_concurrency read these points, so a lucky repeat counts no more than an unlucky one;
-- the index (best_configurations) keeps the upstream's rule, the lowest-energy row. Concurrency and
-- latencies are the repeats' means too. Repeats that differ in parallelism or precision (none do in
-- the upstream's files) would stay apart, as different deployments.
create or replace view configuration_points as

with

token_repeats as (
    select
        snapshot_id, 'token' as family, task, model_id, slug, gpu, row_id, num_gpus,
        tensor_parallel, data_parallel, expert_parallel,
        cast(null as bigint) as ulysses_degree, cast(null as bigint) as ring_degree, precision,
        cast(null as bigint) as width, cast(null as bigint) as height, cast(null as bigint) as num_frames,
        cast(null as bigint) as fps, cast(null as bigint) as inference_steps,
        max_num_seqs as batch_limit, 'million output tokens' as unit_label,
        wh_per_million_output_tokens as wh_per_unit, avg_batch_size as measured_concurrency,
        median_itl_ms, p90_itl_ms, p99_itl_ms, cast(null as double) as batch_latency_s
    from configurations
),

diffusion_repeats as (
    select
        snapshot_id, 'diffusion' as family, task, model_id, slug, gpu, row_id, num_gpus,
        cast(null as bigint) as tensor_parallel, cast(null as bigint) as data_parallel,
        cast(null as bigint) as expert_parallel,
        ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps,
        batch_size as batch_limit, unit as unit_label,
        wh_per_output as wh_per_unit, cast(batch_size as double) as measured_concurrency,
        cast(null as double) as median_itl_ms, cast(null as double) as p90_itl_ms,
        cast(null as double) as p99_itl_ms, batch_latency_s
    from diffusion_configurations_current
),

repeats as (
    select * from token_repeats
    union all
    select * from diffusion_repeats
),

points as (
    select
        snapshot_id, family, task, model_id, slug, gpu, row_id, num_gpus,
        tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, batch_limit, unit_label,
        count(*) as n_repeats,
        avg(wh_per_unit) as wh_per_unit,
        min(wh_per_unit) as wh_per_unit_min,
        max(wh_per_unit) as wh_per_unit_max,
        avg(measured_concurrency) as measured_concurrency,
        avg(median_itl_ms) as median_itl_ms,
        avg(p90_itl_ms) as p90_itl_ms,
        avg(p99_itl_ms) as p99_itl_ms,
        avg(batch_latency_s) as batch_latency_s
    from repeats
    group by
        snapshot_id, family, task, model_id, slug, gpu, row_id, num_gpus,
        tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, batch_limit, unit_label
)

select * from points;
