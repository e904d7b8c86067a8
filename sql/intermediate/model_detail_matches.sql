-- model_detail_matches: each per-model detail configuration paired with its task-file row.
-- grain: one row per matched pair, or per row with no partner on the other side
-- key: snapshot_id, task, model_id, configuration, repeat
-- A detail configuration matches the task-file row of the same task, model, configuration and repeat
-- (the n-th measurement of a configuration in one file pairs with the n-th in the other, numbered alike).
create or replace view model_detail_matches as

with
detail_rows as (
    select
        d.snapshot_id, d.task, d.model_id,
        case
            when f.family = 'diffusion' then diffusion_configuration_label(
                d.gpu_model, d.num_gpus, d.batch_size, coalesce(d.image_width, d.video_width),
                coalesce(d.image_height, d.video_height), d.num_frames, d.fps, d.inference_steps,
                d.ulysses_degree, d.ring_degree
            )
            else token_configuration_label(d.gpu_model, d.num_gpus, d.max_num_seqs)
        end as configuration,
        d.detail_ordinal
    from model_detail_configurations as d
    join tasks as f on f.snapshot_id = d.snapshot_id and f.task = d.task
),

task_file_rows as (
    select snapshot_id, task, model_id, configuration, repeat, source_ordinal from stg_token_configurations
    union all
    select snapshot_id, task, model_id, configuration, repeat, source_ordinal from stg_diffusion_configurations
)

select
    coalesce(d.snapshot_id, t.snapshot_id) as snapshot_id, coalesce(d.task, t.task) as task,
    coalesce(d.model_id, t.model_id) as model_id, coalesce(d.configuration, t.configuration) as configuration,
    coalesce(d.repeat, t.repeat) as repeat, d.detail_ordinal, t.source_ordinal,
    case
        when d.detail_ordinal is null then 'task file only'
        when t.source_ordinal is null then 'detail file only'
        else 'matched'
    end as match_status
from (select *, row_number() over (partition by snapshot_id, task, model_id, configuration order by detail_ordinal)
      as repeat from detail_rows) as d
full join task_file_rows as t
    on t.snapshot_id = d.snapshot_id and t.task = d.task and t.model_id = d.model_id
    and t.configuration = d.configuration and t.repeat = d.repeat;
