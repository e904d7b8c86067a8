-- diffusion_configuration_history: every measured text-to-image and text-to-video configuration of
-- every snapshot, in the index's vocabulary, with derived units.
-- grain: one row per snapshot × diffusion task file entry
-- key: (snapshot_id, task, row_id, repeat)
create or replace view diffusion_configuration_history as

with

measured as (
    select * from stg_diffusion_configurations
),

ceilings as (
    select task, batch_latency_ceiling_s from latency_ceilings
),

renamed as (
    select
        snapshot_id,
        task,
        model_id,
        slug,
        configuration,
        gpu_model as gpu,
        num_gpus,
        ulysses_degree,
        ring_degree,
        weight_precision,
        precision_label(weight_precision) as precision,
        batch_size,
        width,
        height,
        num_frames,
        fps,
        inference_steps,
        repeat,
        source_ordinal,
        case when energy_per_image_joules is not null then 'image' else 'video' end as unit,
        coalesce(energy_per_image_joules, energy_per_video_joules) as joules_per_output,
        wh_from_joules(coalesce(energy_per_image_joules, energy_per_video_joules)) as wh_per_output,
        coalesce(throughput_images_per_sec, throughput_videos_per_sec) as outputs_per_second,
        batch_latency_s,
        avg_power_watts as gpu_power_watts_total,
    from measured
),

flagged as (
    select
        renamed.* exclude (configuration),
        renamed.batch_latency_s <= ceilings.batch_latency_ceiling_s as under_latency_ceiling,
        renamed.slug || '/' || renamed.configuration as row_id,
    from renamed
    left join ceilings on ceilings.task = renamed.task
)

select * from flagged;
