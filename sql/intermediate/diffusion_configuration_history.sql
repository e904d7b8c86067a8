-- diffusion_configuration_history: every measured text-to-image and text-to-video configuration of
-- every snapshot, in the index's vocabulary, with derived units.
-- grain: one row per snapshot × diffusion task file entry
-- key: snapshot_id, task, row_id, repeat
create or replace view diffusion_configuration_history as

select
    d.snapshot_id, d.task, d.model_id, d.slug, d.gpu_model as gpu, d.num_gpus, d.ulysses_degree, d.ring_degree,
    d.weight_precision, precision_label(d.weight_precision) as precision, d.batch_size, d.width, d.height,
    d.num_frames, d.fps, d.inference_steps, d.repeat, d.source_ordinal,
    case when d.energy_per_image_joules is not null then 'image' else 'video' end as unit,
    coalesce(d.energy_per_image_joules, d.energy_per_video_joules) as joules_per_output,
    wh_from_joules(coalesce(d.energy_per_image_joules, d.energy_per_video_joules)) as wh_per_output,
    coalesce(d.throughput_images_per_sec, d.throughput_videos_per_sec) as outputs_per_second,
    d.batch_latency_s,
    d.avg_power_watts as gpu_power_watts_total,
    d.batch_latency_s <= c.batch_latency_ceiling_s as under_latency_ceiling,
    d.slug || '/' || d.configuration as row_id
from stg_diffusion_configurations as d
left join latency_ceilings as c on c.task = d.task;
