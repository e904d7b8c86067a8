-- energy_at_concurrency: table macro; energy per output of a model on a GPU at a concurrency you run:
-- select * from energy_at_concurrency('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100).
-- grain: one row per deployment of the model on the GPU in the index snapshot (GPU count, parallelism,
--     precision; for diffusion also resolution, frames and steps)
-- key: num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps
-- null in key: tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps
-- Concurrency is the average running batch for token tasks (requests in flight, the upstream's
-- avg_batch_size, as measured, not max_num_seqs) and the batch size for diffusion. Each configuration
-- is one point (configuration_points): its repeats' mean energy at their mean concurrency, so the
-- answer cannot jump between repeats whose batches differ by a hair. Between two neighbouring points
-- the energy per output and the latency are interpolated linearly in log concurrency; the interval
-- (wh_per_unit_low, wh_per_unit_high) interpolates the two points' lowest and highest repeats the same
-- way, so it holds every line through one repeat of each. Outside the measured range nothing is
-- extrapolated: the row says 'below measured range' or 'above measured range' and gives no figure.
-- Optional num_gpus and precision narrow the deployments. A task, model or GPU the index snapshot does
-- not have is an error naming it and the nearest names, not an empty answer.
create or replace macro energy_at_concurrency(
    task_name, model, gpu_name, concurrency, gpus := null, precision_name := null
) as table

with
-- Two configurations of one deployment measured at exactly the same concurrency are one point.
points as (
    select
        {
            num_gpus: num_gpus, tensor_parallel: tensor_parallel, data_parallel: data_parallel,
            expert_parallel: expert_parallel, ulysses_degree: ulysses_degree, ring_degree: ring_degree,
            precision: precision, width: width, height: height, num_frames: num_frames, fps: fps,
            inference_steps: inference_steps, unit_label: unit_label,
            latency_metric: case family when 'token' then 'median_itl_ms' else 'batch_latency_s' end
        } as deployment,
        measured_concurrency as x, sum(n_repeats) as n_repeats, avg(wh_per_unit) as energy,
        min(wh_per_unit_min) as energy_low, max(wh_per_unit_max) as energy_high,
        avg(coalesce(median_itl_ms, batch_latency_s)) as latency
    from configuration_points
    where task = checked_index_name('task', task_name) and model_id = checked_index_name('model', model)
        and gpu = checked_index_name('GPU', gpu_name)
        and (gpus is null or num_gpus = gpus) and (precision_name is null or precision = upper(precision_name))
    group by all
),

-- The measured points either side of the concurrency asked for (x is unique within a deployment).
bracketed as (
    select
        deployment, count(*) as measured_points, min(x) as lowest_measured, max(x) as highest_measured,
        max(x) filter (where x <= concurrency) as lower_x,
        min(x) filter (where x >= concurrency) as upper_x,
        arg_max_null(energy, x) filter (where x <= concurrency) as lower_wh_per_unit,
        arg_min_null(energy, x) filter (where x >= concurrency) as upper_wh_per_unit,
        arg_max_null(n_repeats, x) filter (where x <= concurrency) as lower_n_repeats,
        arg_min_null(n_repeats, x) filter (where x >= concurrency) as upper_n_repeats,
        arg_max_null(energy_low, x) filter (where x <= concurrency) as lower_low,
        arg_min_null(energy_low, x) filter (where x >= concurrency) as upper_low,
        arg_max_null(energy_high, x) filter (where x <= concurrency) as lower_high,
        arg_min_null(energy_high, x) filter (where x >= concurrency) as upper_high,
        arg_max_null(latency, x) filter (where x <= concurrency) as lower_latency,
        arg_min_null(latency, x) filter (where x >= concurrency) as upper_latency
    from points
    group by deployment
),

weighted as (
    select
        bracketed.*,
        case
            when lower_x is null or upper_x is null then null
            when lower_x = upper_x then 0.0
            else (ln(concurrency) - ln(lower_x)) / (ln(upper_x) - ln(lower_x))
        end as weight
    from bracketed
)

select
    cast(concurrency as double) as concurrency, unnest(deployment),
    measured_points, lowest_measured, highest_measured, lower_x, upper_x,
    case
        when lower_x is null then 'below measured range'
        when upper_x is null then 'above measured range'
        when lower_x = upper_x then 'measured'
        else 'interpolated'
    end as method,
    lower_wh_per_unit + (upper_wh_per_unit - lower_wh_per_unit) * weight as wh_per_unit,
    lower_low + (upper_low - lower_low) * weight as wh_per_unit_low,
    lower_high + (upper_high - lower_high) * weight as wh_per_unit_high,
    lower_latency + (upper_latency - lower_latency) * weight as latency,
    lower_wh_per_unit, upper_wh_per_unit, lower_n_repeats, upper_n_repeats
from weighted
order by deployment.num_gpus, deployment.tensor_parallel, deployment.data_parallel, deployment.expert_parallel,
    deployment.ulysses_degree, deployment.ring_degree, deployment.precision, deployment.width, deployment.height,
    deployment.num_frames, deployment.fps, deployment.inference_steps;
