-- best_configuration_history: per snapshot, the lowest-energy configuration of each model on each GPU
-- within the ITL deadline.
-- grain: one row per snapshot × task × model × GPU that has a configuration under the deadline
-- key: (snapshot_id, task, model_id, gpu)
-- inputs: configuration_history
-- Ties on energy go to fewer GPUs, then the smaller max_num_seqs, then the earlier repeat.
create or replace view best_configuration_history as

with

candidates as (
    select * from configuration_history
    where under_itl_deadline
),

ranked as (
    select
        candidates.*,
        row_number() over (
            partition by snapshot_id, task, model_id, gpu
            order by joules_per_output_token, num_gpus, max_num_seqs, repeat
        ) as rank_within_gpu,
    from candidates
),

best as (
    select * exclude (rank_within_gpu)
    from ranked
    where rank_within_gpu = 1
)

select * from best;

comment on view best_configuration_history is 'The lowest-energy configuration per snapshot × task × model × GPU whose median ITL is within the deadline; columns as in configuration_history.';
