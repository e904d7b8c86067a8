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
-- the energy per output and the latency (latency_ms: median ITL of a token task; latency_s: batch
-- latency of a diffusion task; the other null) are interpolated linearly in log concurrency; the interval
-- (wh_per_unit_low, wh_per_unit_high) interpolates the two points' lowest and highest repeats the same
-- way, so it holds every line through one repeat of each. Outside the measured range nothing is
-- extrapolated: the row says 'below measured range' or 'above measured range' and gives no figure.
-- Optional num_gpus and precision narrow the deployments. A task, model or GPU the index snapshot does
-- not have is an error naming it and the nearest names, not an empty answer; once they are checked the
-- rows are energy_at_concurrency_unchecked's.
create or replace macro energy_at_concurrency(
    task_name, model, gpu_name, concurrency, gpus := null, precision_name := null
) as table

select *
from energy_at_concurrency_unchecked(
    checked_index_name('task', task_name), checked_index_name('model', model), checked_index_name('GPU', gpu_name),
    concurrency, gpus := gpus, precision_name := precision_name
);
