-- index_curve_checks: each index figure (best_configurations) against its deployment's fitted energy
-- curve (efficiency_curve_fits, quantity 'energy': the logistic fitted to every batch limit the
-- deployment was measured at, repeats averaged): the fit's status, the curve's figure at the row's batch
-- limit (max_num_seqs; diffusion: the batch size), the index figure's departure from it as a fraction of
-- it, and the bound the validity code departs_from_curve tests that departure against: the code's
-- threshold (validity_codes) times the curve's median leave-one-out error. Where the fit is not fit for
-- use the curve's figure, departure and bound are null (validity code no_usable_fit).
-- grain: one row per best_configurations row
-- key: task, model_id, gpu
create or replace view index_curve_checks as

with
index_rows as (
    select *, case when family = 'token' then max_num_seqs else batch_size end as batch_limit
    from best_configurations
),

departure_rule as (
    select threshold from validity_codes where code = 'departs_from_curve'
),

-- The row's deployment: its fit shares every deployment column (those a family does not have are null
-- on both sides).
fitted as (
    select
        r.snapshot_id, r.family, r.task, r.model_id, r.gpu, r.row_id, r.unit_label, r.batch_limit,
        r.wh_per_unit, f.fit_status, coalesce(f.is_fit_for_use, false) as is_fit_for_use,
        f.leave_one_out_median_error,
        -- The fit's curve as energy_from_fit evaluates it; least(): exp overflows past 709.
        case when f.is_fit_for_use
            then f.b0 + f.L / (1 + exp(least(709, -f.k * (log2(r.batch_limit) - f.x0))))
        end as curve_wh_per_unit
    from index_rows as r
    left join efficiency_curve_fits as f
        on f.quantity = 'energy' and f.snapshot_id = r.snapshot_id and f.task = r.task
        and f.model_id = r.model_id and f.gpu = r.gpu and f.num_gpus = r.num_gpus
        and f.tensor_parallel is not distinct from r.tensor_parallel
        and f.data_parallel is not distinct from r.data_parallel
        and f.expert_parallel is not distinct from r.expert_parallel
        and f.ulysses_degree is not distinct from r.ulysses_degree
        and f.ring_degree is not distinct from r.ring_degree
        and f.precision is not distinct from r.precision
        and f.width is not distinct from r.width and f.height is not distinct from r.height
        and f.num_frames is not distinct from r.num_frames and f.fps is not distinct from r.fps
        and f.inference_steps is not distinct from r.inference_steps
)

select
    snapshot_id, family, task, model_id, gpu, row_id, unit_label, batch_limit, wh_per_unit,
    fit_status, is_fit_for_use, leave_one_out_median_error, curve_wh_per_unit,
    wh_per_unit / curve_wh_per_unit - 1 as curve_departure,
    case when is_fit_for_use then (select threshold from departure_rule) * leave_one_out_median_error
    end as curve_departure_bound
from fitted;
