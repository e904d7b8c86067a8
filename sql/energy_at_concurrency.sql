-- energy_at_concurrency: table macro; energy per output of a model on a GPU at a concurrency you run:
-- select * from energy_at_concurrency('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 100).
-- grain: one row per deployment of the model on the GPU in the index snapshot (GPU count, parallelism,
-- precision; for diffusion also resolution, frames and steps)
-- key: (num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps)
-- inputs: configurations, diffusion_configurations_current, checked_index_name
-- Concurrency is the average running batch for token tasks (requests in flight, the upstream's
-- avg_batch_size, as measured, not max_num_seqs) and the batch size for diffusion. Between two
-- measured points the energy per output and the latency are interpolated linearly in log concurrency;
-- repeats at one point are averaged. Outside the measured range nothing is extrapolated: the row says
-- 'below measured range' or 'above measured range' and gives no figure. Optional num_gpus and
-- precision narrow the deployments. A task, model or GPU the index snapshot does not have is an error
-- naming it and the nearest names, not an empty answer.
create or replace macro energy_at_concurrency(task_name, model, gpu_name, concurrency, gpus := null, precision_name := null) as table

with

token_points as (
    select
        num_gpus, tensor_parallel, data_parallel, expert_parallel,
        null::bigint as ulysses_degree, null::bigint as ring_degree, precision,
        null::bigint as width, null::bigint as height, null::bigint as num_frames, null::bigint as fps,
        null::bigint as inference_steps,
        'million output tokens' as unit_label, 'median_itl_ms' as latency_metric,
        avg_batch_size as x, wh_per_million_output_tokens as energy, median_itl_ms as latency,
    from configurations
    where task = checked_index_name('task', task_name) and model_id = checked_index_name('model', model)
        and gpu = checked_index_name('GPU', gpu_name)
),

diffusion_points as (
    select
        num_gpus, null::bigint as tensor_parallel, null::bigint as data_parallel, null::bigint as expert_parallel,
        ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps,
        unit as unit_label, 'batch_latency_s' as latency_metric,
        batch_size::double as x, wh_per_output as energy, batch_latency_s as latency,
    from diffusion_configurations_current
    where task = checked_index_name('task', task_name) and model_id = checked_index_name('model', model)
        and gpu = checked_index_name('GPU', gpu_name)
),

points as (
    select * from (select * from token_points union all select * from diffusion_points)
    where (gpus is null or num_gpus = gpus) and (precision_name is null or precision = upper(precision_name))
),

averaged as (
    select * exclude (energy, latency), avg(energy) as energy, avg(latency) as latency,
    from points
    group by all
),

bracketed as (
    select
        num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
        width, height, num_frames, fps, inference_steps, unit_label, latency_metric,
        min(x) as lowest_measured, max(x) as highest_measured,
        max(x) filter (where x <= concurrency) as lower_x,
        min(x) filter (where x >= concurrency) as upper_x,
        arg_max(energy, x) filter (where x <= concurrency) as lower_energy,
        arg_min(energy, x) filter (where x >= concurrency) as upper_energy,
        arg_max(latency, x) filter (where x <= concurrency) as lower_latency,
        arg_min(latency, x) filter (where x >= concurrency) as upper_latency,
    from averaged
    group by all
),

estimated as (
    select
        concurrency::double as concurrency,
        * exclude (lower_energy, upper_energy, lower_latency, upper_latency),
        case
            when lower_x is null then 'below measured range'
            when upper_x is null then 'above measured range'
            when lower_x = upper_x then 'measured'
            else 'interpolated'
        end as method,
        case
            when lower_x is null or upper_x is null then null
            when lower_x = upper_x then lower_energy
            else lower_energy + (upper_energy - lower_energy) * (ln(concurrency) - ln(lower_x)) / (ln(upper_x) - ln(lower_x))
        end as wh_per_unit,
        case
            when lower_x is null or upper_x is null then null
            when lower_x = upper_x then lower_latency
            else lower_latency + (upper_latency - lower_latency) * (ln(concurrency) - ln(lower_x)) / (ln(upper_x) - ln(lower_x))
        end as latency,
    from bracketed
)

select * from estimated
order by num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
    width, height, num_frames, fps, inference_steps;
