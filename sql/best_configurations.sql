-- best_configurations: the lowest-energy configuration of each model on each GPU within the ITL deadline.
-- grain: one row per snapshot × task × model × GPU that has a configuration under the deadline
-- key: (snapshot_id, task, model_id, gpu)
-- inputs: configurations
-- Ties on energy go to fewer GPUs, then the smaller max_num_seqs, then the earlier repeat.
create or replace view best_configurations as

with

candidates as (
    select * from configurations
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

comment on view best_configurations is 'The lowest-energy configuration per snapshot × task × model × GPU whose median ITL is within the deadline; columns as in configurations.';
