-- latency_tier_costs: what a latency requirement costs: each tier's lowest energy of a model on a GPU
-- (tiered_best_configurations) against its lowest energy there with no latency limit (efficiency_curves).
-- grain: one row per task × model × GPU × latency metric × limit that has a configuration within the limit
-- key: task, model_id, gpu, latency_metric, latency_limit
-- relative_to_best is 1 when the requirement costs nothing and 2 when it doubles the energy.
create or replace view latency_tier_costs as

with
unconstrained as (
    select task, model_id, gpu, min(wh_per_unit) as unconstrained_wh_per_unit
    from efficiency_curves
    group by task, model_id, gpu
)

select
    t.snapshot_id, t.task, t.model_id, t.slug, t.gpu, t.latency_metric, t.latency_limit, t.row_id, t.num_gpus,
    t.batch_limit, t.unit_label, t.wh_per_unit, u.unconstrained_wh_per_unit,
    t.wh_per_unit / u.unconstrained_wh_per_unit as relative_to_best,
from tiered_best_configurations as t
join unconstrained as u using (task, model_id, gpu);
