-- efficiency_curves: how energy, throughput, latency and power move with max_num_seqs for one deployment.
-- grain: one row per point of the index snapshot: task × model × GPU × GPU count × parallelism × precision × max_num_seqs × repeat
-- key: (snapshot_id, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, precision, max_num_seqs, repeat)
-- inputs: configurations
create or replace view efficiency_curves as

with

points as (
    select
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
        max_num_seqs,
        repeat,
        row_id,
        joules_per_output_token,
        wh_per_million_output_tokens,
        tokens_per_second,
        median_itl_ms,
        gpu_power_watts_total,
        under_itl_deadline,
    from configurations
),

curves as (
    select
        points.*,
        row_number() over curve as point_index,
        joules_per_output_token / first_value(joules_per_output_token) over curve
            as energy_relative_to_smallest_batch,
    from points
    window curve as (
        partition by snapshot_id, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, precision
        order by max_num_seqs, repeat
        rows between unbounded preceding and current row
    )
)

select * from curves;

comment on view efficiency_curves is 'Energy, throughput, median ITL and power against max_num_seqs, one curve per snapshot × task × model × GPU × GPU count × parallelism × precision.';
comment on column efficiency_curves.point_index is '1-based position of the point on its curve, by max_num_seqs then repeat.';
comment on column efficiency_curves.energy_relative_to_smallest_batch is 'joules_per_output_token ÷ that of the curve''s smallest max_num_seqs (its first repeat).';
