-- index_validity: the validity codes each index row (best_configurations) carries: a code of
-- validity_codes (pipeline/index_v2.toml: its test, threshold and why) holds for the row when its test
-- does. The tests read index_uncertainty (repeats, runner-up margin) and the row's configuration
-- (token tasks: the upstream's stability rule, avg_batch_size / max_num_seqs >= 0.85, and the
-- latency tail, p99 / median inter-token latency).
-- grain: one row per best_configurations row × validity code that holds for it
-- key: task, model_id, gpu, code
create or replace view index_validity as

with
measures as (
    select
        u.task, u.model_id, u.gpu, u.family, u.n_repeats, u.margin_relative,
        (u.wh_repeat_max - u.wh_repeat_min) / u.wh_per_unit as repeat_spread,
        c.avg_batch_size / c.max_num_seqs as stability_ratio,
        c.p99_itl_ms / c.median_itl_ms as latency_tail_ratio
    from index_uncertainty as u
    left join configurations as c
        on c.task = u.task and c.row_id = u.row_id and c.repeat = u.repeat
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
    else false
end;
