-- index_energy_classes: per snapshot, the energy class of each token task's index row
-- (best_configuration_history): the energy_classes letter whose bounds hold its unrounded Wh per million
-- output tokens at the gpu_only boundary. Diffusion rows have none (their unit has no output tokens).
-- grain: one row per best_configuration_history row of a token task
-- key: snapshot_id, task, model_id, gpu
create or replace view index_energy_classes as

select b.snapshot_id, b.task, b.model_id, b.gpu, e.energy_class
from best_configuration_history as b
join energy_classes as e
    on b.wh_per_unit >= e.lower_bound and (e.upper_bound is null or b.wh_per_unit < e.upper_bound)
where b.family = 'token';
