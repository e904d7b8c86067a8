-- index_history: every snapshot's index figures in one tidy table for dashboards: per snapshot, task,
-- model and GPU, the index figure (best_configuration_history) with its unit, the spread of its repeats,
-- the runner-up's margin, the figure at the server and facility boundaries (low, central, high), the
-- energy class (index_energy_classes: token tasks, on ComparIA's scale at the facility boundary; null for
-- diffusion), the snapshot's dates and commit, and the model's display name and parameter counts. The
-- index snapshot's retrieval date is the one the build states (data_version.retrieved: --retrieved where
-- given), the others' the day of their fetch.
-- grain: one row per snapshot × task × model × GPU that has a configuration within the limit
-- key: snapshot_id, task, model_id, gpu
-- For the index snapshot its rows are index_uncertainty's and index_boundaries' (pivoted to columns by
-- index_boundary_columns).
-- The runner-up is index_runner_ups'; a tie on energy has margin 0, a lone configuration no runner-up.
create or replace view index_history as

with
repeats as (
    select
        snapshot_id, task, row_id, count(*) as n_repeats,
        min(wh_per_unit) as wh_repeat_min, max(wh_per_unit) as wh_repeat_max
    from unified_configurations
    group by snapshot_id, task, row_id
)

select
    b.snapshot_id, s.position as snapshot_position, s.last_updated,
    case when b.snapshot_id = v.snapshot_id then v.retrieved else cast(s.retrieved as date) end as retrieved,
    s.commit, s.commit_time,
    b.family, b.task, b.model_id, b.slug, m.nickname, m.total_params_billions, m.activated_params_billions,
    b.gpu, b.row_id, b.repeat, b.unit_label, b.wh_per_unit,
    p.n_repeats, p.wh_repeat_min, p.wh_repeat_max,
    r.runner_up_row_id, r.runner_up_wh_per_unit,
    r.runner_up_wh_per_unit - b.wh_per_unit as margin_wh_per_unit,
    (r.runner_up_wh_per_unit - b.wh_per_unit) / b.wh_per_unit as margin_relative,
    case
        when r.runner_up_row_id is null then 'only configuration within the limit'
        when r.runner_up_joules_per_unit = coalesce(b.joules_per_output_token, b.joules_per_output)
            then 'tie on energy, decided by fewer GPUs, the smaller batch, then file order'
        else 'lowest energy'
    end as choice_basis,
    d.server_wh_per_unit_low, d.server_wh_per_unit_central, d.server_wh_per_unit_high,
    d.facility_wh_per_unit_low, d.facility_wh_per_unit_central, d.facility_wh_per_unit_high,
    e.energy_class
from best_configuration_history as b
join snapshot_history as s on s.snapshot_id = b.snapshot_id
cross join data_version as v
left join models as m on m.snapshot_id = b.snapshot_id and m.model_id = b.model_id
left join repeats as p on p.snapshot_id = b.snapshot_id and p.task = b.task and p.row_id = b.row_id
left join index_runner_ups as r
    on r.snapshot_id = b.snapshot_id and r.task = b.task and r.model_id = b.model_id and r.gpu = b.gpu
left join index_boundary_columns as d
    on d.snapshot_id = b.snapshot_id and d.task = b.task and d.model_id = b.model_id and d.gpu = b.gpu
left join index_energy_classes as e
    on e.snapshot_id = b.snapshot_id and e.task = b.task and e.model_id = b.model_id and e.gpu = b.gpu;
