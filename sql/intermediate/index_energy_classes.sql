-- index_energy_classes: per snapshot, the energy class of each token task's index row
-- (best_configuration_history) on ComparIA's scale (energy_classes): the letter whose bounds hold its
-- unrounded Wh per million output tokens at the scale's boundary (energy_classes.boundary: facility,
-- where ComparIA applies it) with the central factors, the letters with the low and the high factors,
-- and the span between them ('B–C'; one letter where both agree). A GPU without boundary factors has no
-- figure at that boundary and so no class: never a letter read at another boundary.
-- grain: one row per best_configuration_history row of a token task
-- key: snapshot_id, task, model_id, gpu
create or replace view index_energy_classes as

with
-- The figures at the scale's boundary (index_v2.toml declares one for every letter).
scale_figures as (
    select snapshot_id, task, model_id, gpu, wh_per_unit_low, wh_per_unit_central, wh_per_unit_high
    from index_boundary_history
    where boundary in (select boundary from energy_classes)
),

figures as (
    select
        b.snapshot_id, b.task, b.model_id, b.gpu,
        h.wh_per_unit_low, h.wh_per_unit_central, h.wh_per_unit_high
    from best_configuration_history as b
    left join scale_figures as h
        on h.snapshot_id = b.snapshot_id and h.task = b.task and h.model_id = b.model_id and h.gpu = b.gpu
    where b.family = 'token'
),

lettered as (
    select
        f.snapshot_id, f.task, f.model_id, f.gpu,
        central.energy_class, low.energy_class as energy_class_low, high.energy_class as energy_class_high
    from figures as f
    left join energy_classes as central
        on f.wh_per_unit_central >= central.lower_bound
        and (central.upper_bound is null or f.wh_per_unit_central < central.upper_bound)
    left join energy_classes as low
        on f.wh_per_unit_low >= low.lower_bound and (low.upper_bound is null or f.wh_per_unit_low < low.upper_bound)
    left join energy_classes as high
        on f.wh_per_unit_high >= high.lower_bound and (high.upper_bound is null or f.wh_per_unit_high < high.upper_bound)
)

select
    snapshot_id, task, model_id, gpu, energy_class, energy_class_low, energy_class_high,
    case
        when energy_class_low = energy_class_high then energy_class_low
        else energy_class_low || '–' || energy_class_high
    end as energy_class_span
from lettered;
