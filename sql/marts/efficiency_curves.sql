-- efficiency_curves: how energy, throughput, latency and power move with the batch limit for one
-- deployment of the index snapshot: max_num_seqs for token tasks, batch size for diffusion tasks.
-- grain: one row per point: a configuration of the index snapshot
-- key: token: (task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, precision, max_num_seqs, repeat);
--      diffusion: (task, row_id, repeat)
create or replace view efficiency_curves as

with

token_points as (
    select
        'token' as family,
        snapshot_id,
        task,
        model_id,
        slug,
        gpu,
        num_gpus,
        tensor_parallel,
        data_parallel,
        expert_parallel,
        precision,
        max_num_seqs as batch_limit,
        repeat,
        row_id,
        joules_per_output_token as joules_per_unit,
        wh_per_million_output_tokens as wh_per_unit,
        tokens_per_second as units_per_second,
        median_itl_ms,
        null::double as batch_latency_s,
        gpu_power_watts_total,
        under_itl_deadline as is_within_latency_limit,
    from configurations
),

diffusion_points as (
    select
        'diffusion' as family,
        snapshot_id,
        task,
        model_id,
        slug,
        gpu,
        num_gpus,
        ulysses_degree,
        ring_degree,
        precision,
        width,
        height,
        num_frames,
        fps,
        inference_steps,
        batch_size as batch_limit,
        repeat,
        source_ordinal,
        row_id,
        joules_per_output as joules_per_unit,
        wh_per_output as wh_per_unit,
        outputs_per_second as units_per_second,
        null::double as median_itl_ms,
        batch_latency_s,
        gpu_power_watts_total,
        under_latency_ceiling as is_within_latency_limit,
    from diffusion_configurations_current
),

token_curves as (
    select
        token_points.*,
        row_number() over curve as point_index,
        joules_per_unit / first_value(joules_per_unit) over curve as energy_relative_to_smallest_batch,
    from token_points
    window curve as (
        partition by snapshot_id, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, precision
        order by batch_limit, repeat
        rows between unbounded preceding and current row
    )
),

diffusion_curves as (
    select
        diffusion_points.* exclude (source_ordinal),
        row_number() over curve as point_index,
        joules_per_unit / first_value(joules_per_unit) over curve as energy_relative_to_smallest_batch,
    from diffusion_points
    window curve as (
        partition by snapshot_id, task, model_id, gpu, num_gpus, ulysses_degree, ring_degree, precision,
            width, height, num_frames, fps, inference_steps
        order by batch_limit, repeat, source_ordinal
        rows between unbounded preceding and current row
    )
),

-- The token columns, then the diffusion-only ones, each family's missing columns null.
curves as (
    select
        family, snapshot_id, task, model_id, slug, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel,
        precision, batch_limit, repeat, row_id, joules_per_unit, wh_per_unit, units_per_second, median_itl_ms,
        batch_latency_s, gpu_power_watts_total, is_within_latency_limit, point_index, energy_relative_to_smallest_batch,
        null::bigint as ulysses_degree, null::bigint as ring_degree, null::bigint as width, null::bigint as height,
        null::bigint as num_frames, null::bigint as fps, null::bigint as inference_steps,
    from token_curves
    union all
    select
        family, snapshot_id, task, model_id, slug, gpu, num_gpus, null::bigint as tensor_parallel,
        null::bigint as data_parallel, null::bigint as expert_parallel,
        precision, batch_limit, repeat, row_id, joules_per_unit, wh_per_unit, units_per_second, median_itl_ms,
        batch_latency_s, gpu_power_watts_total, is_within_latency_limit, point_index, energy_relative_to_smallest_batch,
        ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps,
    from diffusion_curves
)

select * from curves;
