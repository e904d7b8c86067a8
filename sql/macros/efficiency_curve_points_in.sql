-- efficiency_curve_points_in: table macro; for one snapshot (null: every snapshot), each deployment's
-- efficiency curve as the points a logistic is fitted to: per batch limit (max_num_seqs for token
-- tasks, the batch size for diffusion; the leaderboard toolkit's batch size), the repeats' means of
-- energy per output, GPU power, throughput and the family's latency. The build fits these points
-- (pipeline/fits.py) and stores the fits once per snapshot as the table efficiency_curve_fits.
-- grain: one row per snapshot × task × model × GPU × deployment (GPU count, parallelism, precision; for
--     diffusion also resolution, frames and steps) × batch limit
-- key: snapshot_id, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps, batch_limit
-- null in key: tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps
-- An id the database does not hold is an error naming it and the nearest ids, not an empty answer.
create or replace macro efficiency_curve_points_in(of_snapshot) as table

select
    snapshot_id, family, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel,
    ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps, unit_label,
    batch_limit,
    count(*) as n_repeats,
    avg(wh_per_unit) as wh_per_unit,
    avg(gpu_power_watts_total) as gpu_power_watts_total,
    avg(units_per_second) as units_per_second,
    avg(median_itl_ms) as median_itl_ms,
    avg(batch_latency_s) as batch_latency_s
from unified_configurations
where of_snapshot is null or snapshot_id = checked_snapshot_id(of_snapshot)
group by
    snapshot_id, family, task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel,
    ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps, unit_label,
    batch_limit;
