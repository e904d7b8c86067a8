-- stg_diffusion_configurations: staging; every diffusion task-file entry of every snapshot as the
-- upstream gave it, with what is derived from it once: its repeat, the model's slug, the output's width
-- and height (image or video) and what was measured (configuration).
-- grain: one row per snapshot × diffusion task file entry
-- key: snapshot_id, task, model_id, configuration, repeat
-- repeat: the entry's 1-based ordinal, in file order, among the model's entries with its configuration
-- (what was measured: schemas/dictionary.toml measured_key, as the label names it).
create or replace view stg_diffusion_configurations as

with
labelled as (
    select
        *,
        model_slug(model_id) as slug,
        diffusion_configuration_label(
            gpu_model, num_gpus, batch_size, coalesce(image_width, video_width), coalesce(image_height, video_height),
            num_frames, fps, inference_steps, ulysses_degree, ring_degree
        ) as configuration,
    from diffusion_configurations
)

select
    snapshot_id,
    task,
    source_ordinal,
    row_number() over (partition by snapshot_id, task, model_id, configuration order by source_ordinal) as repeat,
    * exclude (snapshot_id, task, source_ordinal, slug, configuration),
    coalesce(image_width, video_width) as width,
    coalesce(image_height, video_height) as height,
    slug,
    configuration,
from labelled;
