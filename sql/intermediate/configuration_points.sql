-- configuration_points: the index snapshot's configurations, token and diffusion alike, each as one
-- measured point: its repeats merged into their mean, with the lowest and highest repeat beside it.
-- grain: one row per task × configuration (row_id) of the index snapshot
-- key: task, row_id
-- A repeat is a second measurement of the same configuration in one task file. The frontier and
-- energy_at_concurrency read these points, so a lucky repeat counts no more than an unlucky one;
-- the index (best_configurations) keeps the upstream's rule, the lowest-energy row. Concurrency (the
-- average running batch for token tasks, the batch size for diffusion) and latencies are the repeats'
-- means too. Repeats that differ in parallelism or precision (none do in the upstream's files) would
-- stay apart, as different deployments. Throughput, power and output length are the repeats' means, as
-- fleet_plan sizes a fleet from them.
-- stored: the build keeps its rows as a table, computed once per build; estimate and plan read it, and
-- grouping the repeats again for each question cost as long as the rest of their work.
create or replace view configuration_points as

select
    snapshot_id, family, task, model_id, slug, gpu, row_id, num_gpus,
    tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
    width, height, num_frames, fps, inference_steps, batch_limit, unit_label,
    count(*) as n_repeats,
    avg(wh_per_unit) as wh_per_unit,
    min(wh_per_unit) as wh_per_unit_min,
    max(wh_per_unit) as wh_per_unit_max,
    avg(coalesce(avg_batch_size, batch_size)) as measured_concurrency,
    avg(median_itl_ms) as median_itl_ms,
    avg(p90_itl_ms) as p90_itl_ms,
    avg(p99_itl_ms) as p99_itl_ms,
    avg(batch_latency_s) as batch_latency_s,
    avg(units_per_second) as units_per_second,
    avg(gpu_power_watts_total) as gpu_power_watts_total,
    avg(avg_output_tokens) as avg_output_tokens
from unified_configurations
where in_index_snapshot
group by
    snapshot_id, family, task, model_id, slug, gpu, row_id, num_gpus,
    tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision,
    width, height, num_frames, fps, inference_steps, batch_limit, unit_label;
