-- diffusion_configuration_history: every measured text-to-image and text-to-video configuration of
-- every snapshot, in the index's vocabulary, with derived units.
-- grain: one row per snapshot × diffusion task file entry
-- key: (snapshot_id, task, row_id, repeat)
-- inputs: diffusion_configurations, latency_ceilings, diffusion_configuration_label
create or replace view diffusion_configuration_history as

with

measured as (
    select * from diffusion_configurations
),

ceilings as (
    select task, batch_latency_ceiling_s from latency_ceilings
),

renamed as (
    select
        snapshot_id,
        task,
        model_id,
        lower(regexp_extract(model_id, '[^/]*$')) as slug,
        gpu_model as gpu,
        num_gpus,
        ulysses_degree,
        ring_degree,
        weight_precision,
        case weight_precision when 'bfloat16' then 'BF16' else upper(weight_precision) end as precision,
        batch_size,
        coalesce(image_width, video_width) as width,
        coalesce(image_height, video_height) as height,
        num_frames,
        fps,
        inference_steps,
        repeat,
        source_ordinal,
        case when energy_per_image_joules is not null then 'image' else 'video' end as unit,
        coalesce(energy_per_image_joules, energy_per_video_joules) as joules_per_output,
        coalesce(energy_per_image_joules, energy_per_video_joules) / 3600 as wh_per_output,
        coalesce(throughput_images_per_sec, throughput_videos_per_sec) as outputs_per_second,
        batch_latency_s,
        avg_power_watts as gpu_power_watts_total,
    from measured
),

flagged as (
    select
        renamed.*,
        renamed.batch_latency_s <= ceilings.batch_latency_ceiling_s as under_latency_ceiling,
        renamed.slug || '/' || diffusion_configuration_label(
            renamed.gpu, renamed.num_gpus, renamed.batch_size, renamed.width, renamed.height, renamed.num_frames,
            renamed.fps, renamed.inference_steps, renamed.ulysses_degree, renamed.ring_degree
        ) as row_id,
    from renamed
    left join ceilings on ceilings.task = renamed.task
)

select * from flagged;
