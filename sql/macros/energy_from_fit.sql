-- energy_from_fit: table macro; energy per output of a model on a GPU at the batch limit you run, from
-- the index snapshot's logistic fits (efficiency_curve_fits, quantity 'energy'):
-- select * from energy_from_fit('lm-arena-chat', 'Qwen/Qwen3-8B', 'H100', 128).
-- grain: one row per deployment of the model on the GPU in the index snapshot (GPU count, parallelism,
--     precision; for diffusion also resolution, frames and steps)
-- key: num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps
-- null in key: tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, width, height, num_frames, fps, inference_steps
-- The batch limit is the fit's x: max_num_seqs for token tasks (the leaderboard toolkit's batch size, not
-- the measured average running batch that energy_at_concurrency takes) and the batch size for diffusion.
-- Between the smallest and largest measured batch limits the fit interpolates; outside them it
-- extrapolates by at most one doubling of the batch limit (doublings_outside says how far), because
-- beyond that nothing measured constrains where the logistic levels off. Past that bound, and where the
-- fit is not fit for use (efficiency_curve_fits.fit_status), the row gives no figure and says why.
-- Optional num_gpus and precision narrow the deployments. A task, model or GPU the index snapshot does
-- not have is an error naming it and the nearest names, not an empty answer.
create or replace macro energy_from_fit(
    task_name, model, gpu_name, batch, gpus := null, precision_name := null
) as table

with
fits as (
    select *
    from efficiency_curve_fits
    where snapshot_id = (select snapshot_id from index_snapshot) and quantity = 'energy'
        and task = checked_index_name('task', task_name) and model_id = checked_index_name('model', model)
        and gpu = checked_index_name('GPU', gpu_name)
        and (gpus is null or num_gpus = gpus) and (precision_name is null or precision = upper(precision_name))
),

placed as (
    select
        *,
        case
            when batch < min_batch_limit then log2(min_batch_limit / batch)
            when batch > max_batch_limit then log2(batch / max_batch_limit)
            else 0.0
        end as doublings_outside
    from fits
)

select
    cast(batch as double) as batch_limit, num_gpus, tensor_parallel, data_parallel, expert_parallel,
    ulysses_degree, ring_degree, precision, width, height, num_frames, fps, inference_steps, unit_label,
    n_points, min_batch_limit, max_batch_limit, fit_status, in_sample_max_error, leave_one_out_median_error,
    doublings_outside,
    case
        when not is_fit_for_use then 'no figure: ' || fit_status
        when doublings_outside > 1 then 'no figure: more than one doubling outside the measured batch limits'
        when batch < min_batch_limit then 'extrapolated below the measured batch limits'
        when batch > max_batch_limit then 'extrapolated above the measured batch limits'
        else 'within the measured batch limits'
    end as method,
    case
        when is_fit_for_use and doublings_outside <= 1
            -- least(): exp overflows past 709; the sigmoid is 0 there to the last digit anyway.
            then b0 + L / (1 + exp(least(709, -k * (log2(batch) - x0))))
    end as wh_per_unit
from placed
order by num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width,
    height, num_frames, fps, inference_steps;
