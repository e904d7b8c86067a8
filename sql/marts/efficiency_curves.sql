-- efficiency_curves: how energy, throughput, latency and power move with the batch limit for one
-- deployment of the index snapshot: max_num_seqs for token tasks, batch size for diffusion tasks.
-- grain: one row per point: a configuration of the index snapshot
-- key: task, row_id, repeat
create or replace view efficiency_curves as

select
    family, snapshot_id, task, model_id, slug, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel,
    precision, batch_limit, repeat, row_id, joules_per_unit, wh_per_unit, units_per_second, median_itl_ms,
    batch_latency_s, gpu_power_watts_total, is_within_latency_limit,
    row_number() over curve as point_index,
    joules_per_unit / first_value(joules_per_unit) over curve as energy_relative_to_smallest_batch,
    ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps
from unified_configurations
where in_index_snapshot
window curve as (
    partition by task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, precision,
        ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps
    order by batch_limit, repeat, source_ordinal
    rows between unbounded preceding and current row
);
