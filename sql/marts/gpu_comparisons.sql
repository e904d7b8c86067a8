-- gpu_comparisons: for each model, task and latency tier, its best configuration on one GPU against
-- its best on another GPU at the same tier: how much less (or more) energy per output the other takes.
-- grain: one row per task × model × latency metric × limit × ordered pair of GPUs (baseline, compared)
-- key: task, model_id, latency_metric, latency_limit, baseline_gpu, gpu
-- Both orders are listed, so a filter on baseline_gpu = 'H100' reads "what each GPU saves over H100".
create or replace view gpu_comparisons as

select
    b.snapshot_id, b.task, b.model_id, b.slug, b.latency_metric, b.latency_limit, b.unit_label,
    b.gpu as baseline_gpu, b.row_id as baseline_row_id, b.repeat as baseline_repeat,
    b.wh_per_unit as baseline_wh_per_unit,
    c.gpu, c.row_id, c.repeat, c.wh_per_unit,
    c.wh_per_unit / b.wh_per_unit as energy_ratio,
    b.wh_per_unit - c.wh_per_unit as wh_saved_per_unit,
from tiered_best_configurations as b
join tiered_best_configurations as c
    on c.snapshot_id = b.snapshot_id and c.task = b.task and c.model_id = b.model_id
    and c.latency_metric = b.latency_metric and c.latency_limit = b.latency_limit and c.gpu != b.gpu;
