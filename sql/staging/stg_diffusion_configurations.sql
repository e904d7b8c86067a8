-- stg_diffusion_configurations: staging; every diffusion task-file entry of every snapshot as the
-- upstream gave it, with its identity derived once: the model's slug, the output's width and height
-- (image or video) and what was measured (configuration).
-- grain: one row per snapshot × diffusion task file entry
-- key: (snapshot_id, task, model_id, configuration, repeat)
create or replace view stg_diffusion_configurations as

with

sized as (
    select
        *,
        coalesce(image_width, video_width) as width,
        coalesce(image_height, video_height) as height,
    from diffusion_configurations
)

select
    *,
    model_slug(model_id) as slug,
    diffusion_configuration_label(
        gpu_model, num_gpus, batch_size, width, height, num_frames, fps, inference_steps, ulysses_degree, ring_degree
    ) as configuration,
from sized;
