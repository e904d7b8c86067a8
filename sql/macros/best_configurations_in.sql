-- best_configurations_in: table macro; for one snapshot (null: every snapshot), the lowest-energy
-- configuration of each model on each GPU within the task's latency limit: median ITL for token tasks,
-- batch latency for diffusion tasks. The build stores its rows once per snapshot as the table
-- best_configuration_history: select * from best_configurations_in('<snapshot id>').
-- grain: one row per snapshot × task × model × GPU that has a configuration within the limit
-- key: (snapshot_id, task, model_id, gpu)
-- Ties on energy go to fewer GPUs, then the smaller batch (max_num_seqs or batch_size), then the
-- earlier repeat (and, for diffusion, the earlier entry in the task file). An id the database does not
-- hold is an error naming it and the nearest ids, not an empty answer.
create or replace macro best_configurations_in(of_snapshot) as table

with

chosen as (
    select checked_snapshot_id(of_snapshot) as snapshot_id
),

token_candidates as (
    select
        'token' as family,
        'million output tokens' as unit_label,
        wh_per_million_output_tokens as wh_per_unit,
        *,
    from configuration_history
    where under_itl_deadline and (of_snapshot is null or snapshot_id in (select snapshot_id from chosen))
),

diffusion_candidates as (
    select
        'diffusion' as family,
        unit as unit_label,
        wh_per_output as wh_per_unit,
        *,
    from diffusion_configuration_history
    where under_latency_ceiling and (of_snapshot is null or snapshot_id in (select snapshot_id from chosen))
),

token_ranked as (
    select
        token_candidates.*,
        row_number() over (
            partition by snapshot_id, task, model_id, gpu
            order by joules_per_output_token, num_gpus, max_num_seqs, repeat
        ) as rank_within_gpu,
    from token_candidates
),

diffusion_ranked as (
    select
        diffusion_candidates.*,
        row_number() over (
            partition by snapshot_id, task, model_id, gpu
            order by joules_per_output, num_gpus, batch_size, repeat, source_ordinal
        ) as rank_within_gpu,
    from diffusion_candidates
),

best as (
    select * exclude (rank_within_gpu) from token_ranked where rank_within_gpu = 1
    union all by name
    select * exclude (rank_within_gpu) from diffusion_ranked where rank_within_gpu = 1
)

select * from best;
