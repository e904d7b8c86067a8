-- energy_at_concurrency: table macro; energy per output of a model on a GPU at a concurrency you run:
-- select * from energy_at_concurrency('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100).
-- grain: one row per deployment of the model on the GPU in the index snapshot (GPU count, parallelism,
--     precision; for diffusion also resolution, frames and steps)
-- key: (num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps)
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
create or replace macro energy_at_concurrency(task_name, model, gpu_name, concurrency, gpus := null, precision_name := null) as table

with

points as (
    select
        p.num_gpus, p.tensor_parallel, p.data_parallel, p.expert_parallel, p.ulysses_degree, p.ring_degree,
        p.precision, p.width, p.height, p.num_frames, p.fps, p.inference_steps, p.unit_label,
        case p.family when 'token' then 'median_itl_ms' else 'batch_latency_s' end as latency_metric,
        p.measured_concurrency as x, p.n_repeats, p.wh_per_unit as energy, p.wh_per_unit_min as energy_low,
        p.wh_per_unit_max as energy_high, coalesce(p.median_itl_ms, p.batch_latency_s) as latency
    from configuration_points as p
    where p.task = checked_index_name('task', task_name) and p.model_id = checked_index_name('model', model)
        and p.gpu = checked_index_name('GPU', gpu_name)
        and (gpus is null or p.num_gpus = gpus) and (precision_name is null or p.precision = upper(precision_name))
),

-- Two configurations of one deployment measured at exactly the same concurrency are one point.
merged as (
    select
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric, x,
        sum(n_repeats) as n_repeats, avg(energy) as energy, min(energy_low) as energy_low,
        max(energy_high) as energy_high, avg(latency) as latency
    from points
    group by
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric, x
),

ranked as (
    select
        merged.*,
        case when x <= concurrency then row_number() over (
            partition by num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree,
                precision, width, height, num_frames, fps, inference_steps, unit_label, latency_metric, x <= concurrency
            order by x desc
        ) end as lower_rank,
        case when x >= concurrency then row_number() over (
            partition by num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree,
                precision, width, height, num_frames, fps, inference_steps, unit_label, latency_metric, x >= concurrency
            order by x
        ) end as upper_rank
    from merged
),

bracketed as (
    select
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric,
        count(*) as measured_points,
        min(x) as lowest_measured,
        max(x) as highest_measured,
        max(case when lower_rank = 1 then x end) as lower_x,
        max(case when upper_rank = 1 then x end) as upper_x,
        max(case when lower_rank = 1 then energy end) as lower_wh_per_unit,
        max(case when upper_rank = 1 then energy end) as upper_wh_per_unit,
        max(case when lower_rank = 1 then n_repeats end) as lower_n_repeats,
        max(case when upper_rank = 1 then n_repeats end) as upper_n_repeats,
        max(case when lower_rank = 1 then energy_low end) as lower_low,
        max(case when upper_rank = 1 then energy_low end) as upper_low,
        max(case when lower_rank = 1 then energy_high end) as lower_high,
        max(case when upper_rank = 1 then energy_high end) as upper_high,
        max(case when lower_rank = 1 then latency end) as lower_latency,
        max(case when upper_rank = 1 then latency end) as upper_latency
    from ranked
    group by
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric
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
),

estimated as (
    select
        cast(concurrency as double) as concurrency,
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric,
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
)

select * from estimated
order by num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
    width, height, num_frames, fps, inference_steps;
