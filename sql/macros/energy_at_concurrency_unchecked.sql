-- energy_at_concurrency_unchecked: table macro; the rows of energy_at_concurrency for a task, model id and
-- GPU exactly as the index snapshot spells them, unchecked: a name it does not have gives no rows, where
-- energy_at_concurrency names it and the nearest. energy-index estimate reads it, resolving its names
-- itself and asking the index snapshot's names only when no row comes back.
-- grain: one row per deployment of the model on the GPU in the index snapshot (GPU count, parallelism,
--     precision; for diffusion also resolution, frames and steps)
-- key: num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps
-- null in key: tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps
-- Concurrency is the average running batch for token tasks (requests in flight, the upstream's
-- avg_batch_size, as measured, not max_num_seqs) and the batch size for diffusion. Each configuration
-- is one point (configuration_points): its repeats' mean energy at their mean concurrency, so the
-- answer cannot jump between repeats whose batches differ by a hair. Between two neighbouring points
-- (curve_neighbours, curve_position) the energy per output and the latency (latency_ms: median ITL of a
-- token task; latency_s: batch latency of a diffusion task; the other null) are interpolated linearly in
-- log concurrency; the interval (wh_per_unit_low, wh_per_unit_high) interpolates the two points' lowest
-- and highest repeats the same way, so it holds every line through one repeat of each. Outside the
-- measured range nothing is extrapolated: the row says 'below measured range' or 'above measured range'
-- and gives no figure. Optional num_gpus and precision narrow the deployments.
create or replace macro energy_at_concurrency_unchecked(
    task_name, model, gpu_name, concurrency, gpus := null, precision_name := null
) as table

with
-- Two configurations of one deployment measured at exactly the same concurrency are one point.
points as (
    select
        struct_insert(
            deployment_of(
                num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width,
                height, num_frames, fps, inference_steps
            ),
            unit_label := unit_label,
            latency_metric := case family when 'token' then 'median_itl_ms' else 'batch_latency_s' end
        ) as deployment,
        measured_concurrency as x, sum(n_repeats) as n_repeats, avg(wh_per_unit) as energy,
        min(wh_per_unit_min) as energy_low, max(wh_per_unit_max) as energy_high,
        avg(coalesce(median_itl_ms, batch_latency_s)) as latency
    from configuration_points
    where task = task_name and model_id = model and gpu = gpu_name
        and (gpus is null or num_gpus = gpus) and (precision_name is null or precision = upper(precision_name))
    group by all
),

-- The measured points either side of the concurrency asked for.
bracketed as (
    select
        deployment, count(*) as measured_points, min(x) as lowest_measured, max(x) as highest_measured,
        curve_neighbours(list({x: x, point: {energy: energy, n_repeats: n_repeats, energy_low: energy_low,
                                              energy_high: energy_high, latency: latency}} order by x),
                         concurrency) as neighbours
    from points
    group by deployment
),

positioned as (
    select
        deployment, measured_points, lowest_measured, highest_measured,
        neighbours.lower_x, neighbours.upper_x, neighbours.lower, neighbours.upper,
        curve_position(neighbours, concurrency) as position
    from bracketed
)

select
    cast(concurrency as double) as concurrency, unnest(deployment),
    measured_points, lowest_measured, highest_measured, lower_x, upper_x, position.method,
    lower.energy + (upper.energy - lower.energy) * position.weight as wh_per_unit,
    lower.energy_low + (upper.energy_low - lower.energy_low) * position.weight as wh_per_unit_low,
    lower.energy_high + (upper.energy_high - lower.energy_high) * position.weight as wh_per_unit_high,
    case deployment.latency_metric when 'median_itl_ms'
        then lower.latency + (upper.latency - lower.latency) * position.weight end as latency_ms,
    case deployment.latency_metric when 'batch_latency_s'
        then lower.latency + (upper.latency - lower.latency) * position.weight end as latency_s,
    lower.energy as lower_wh_per_unit, upper.energy as upper_wh_per_unit,
    lower.n_repeats as lower_n_repeats, upper.n_repeats as upper_n_repeats
from positioned
order by deployment.num_gpus, deployment.tensor_parallel, deployment.data_parallel, deployment.expert_parallel,
    deployment.ulysses_degree, deployment.ring_degree, deployment.precision, deployment.width, deployment.height,
    deployment.num_frames, deployment.fps, deployment.inference_steps;
