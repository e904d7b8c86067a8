-- index_validity: the validity codes each index row (best_configurations) carries: a code of
-- validity_codes (pipeline/index_v2.toml: its test, threshold and why) holds for the row when its test
-- does. The tests read index_uncertainty (repeats, runner-up margin), the row's configuration
-- (token tasks: the upstream's stability rule, avg_batch_size / max_num_seqs >= 0.85, and the
-- latency tail, p99 / median inter-token latency) and index_curve_checks (the figure's departure from
-- its deployment's fitted energy curve, and whether that fit is fit for use).
-- grain: one row per best_configurations row × validity code that holds for it
-- key: task, model_id, gpu, code
create or replace view index_validity as

with
measures as (
    select
        u.task, u.model_id, u.gpu, u.family, u.n_repeats, u.margin_relative,
        (u.wh_repeat_max - u.wh_repeat_min) / u.wh_per_unit as repeat_spread,
        c.avg_batch_size / c.max_num_seqs as stability_ratio,
        c.p99_itl_ms / c.median_itl_ms as latency_tail_ratio,
        k.curve_departure, k.curve_departure_bound, k.is_fit_for_use
    from index_uncertainty as u
    left join configurations as c
        on c.task = u.task and c.row_id = u.row_id and c.repeat = u.repeat
    left join index_curve_checks as k on k.task = u.task and k.model_id = u.model_id and k.gpu = u.gpu
),

stability_rule as (
    select threshold as rule_threshold from validity_codes where code = 'below_stability_rule'
)

select m.task, m.model_id, m.gpu, v.position, v.code
from measures as m
join validity_codes as v on v.applies_to = 'all' or v.applies_to = m.family
cross join stability_rule as r
where case v.code
    when 'measured_once' then m.n_repeats <= v.threshold
    when 'repeats_disagree' then m.repeat_spread > v.threshold
    when 'narrow_margin' then m.margin_relative < v.threshold
    when 'below_stability_rule' then m.stability_ratio < v.threshold
    when 'near_stability_rule' then m.stability_ratio >= r.rule_threshold and m.stability_ratio < v.threshold
    when 'latency_tail' then m.latency_tail_ratio > v.threshold
    when 'no_boundary_factors' then m.gpu not in (select gpu from boundary_factor_ranges)
    -- the bound is the threshold times the curve's leave-one-out error (index_curve_checks)
    when 'departs_from_curve' then abs(m.curve_departure) > m.curve_departure_bound
    when 'no_usable_fit' then not m.is_fit_for_use
    else false
end;
