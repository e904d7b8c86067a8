-- index_uncertainty: how sure each index figure is: how many times its configuration was measured and
-- how far its repeats lie apart, and how close the next-best configuration within the same latency
-- limit comes (the margin by which the index's choice was made).
-- grain: one row per best_configurations row
-- key: task, model_id, gpu
-- The runner-up is ranked as the index ranks (unified_configurations' preference), among the other
-- configurations within the limit. A runner-up as cheap as the index row is a tie (margin 0,
-- choice_basis says the tie rule decided); a model and GPU with one configuration within the limit
-- has no runner-up and no margin.
create or replace view index_uncertainty as

with
-- Every configuration within the limit but the index's own, each by its best repeat.
others_ranked as (
    select
        c.task, c.model_id, c.gpu, c.row_id, c.wh_per_unit, c.joules_per_unit,
        row_number() over (partition by c.task, c.model_id, c.gpu order by c.preference) as rank_among_others
    from unified_configurations as c
    join best_configurations as b
        on b.task = c.task and b.model_id = c.model_id and b.gpu = c.gpu and b.row_id != c.row_id
    where c.in_index_snapshot and c.is_within_latency_limit
),

runner_up as (
    select * from others_ranked where rank_among_others = 1
)

select
    b.snapshot_id, b.family, b.task, b.model_id, b.slug, b.gpu, b.row_id, b.repeat, b.unit_label, s.n_repeats,
    b.wh_per_unit, s.wh_per_unit_min as wh_repeat_min, s.wh_per_unit_max as wh_repeat_max,
    r.row_id as runner_up_row_id, r.wh_per_unit as runner_up_wh_per_unit,
    r.wh_per_unit - b.wh_per_unit as margin_wh_per_unit,
    (r.wh_per_unit - b.wh_per_unit) / b.wh_per_unit as margin_relative,
    case
        when r.row_id is null then 'only configuration within the limit'
        when r.joules_per_unit = coalesce(b.joules_per_output_token, b.joules_per_output)
            then 'tie on energy, decided by fewer GPUs, the smaller batch, then file order'
        else 'lowest energy'
    end as choice_basis
from best_configurations as b
left join configuration_points as s on s.task = b.task and s.row_id = b.row_id
left join runner_up as r on r.task = b.task and r.model_id = b.model_id and r.gpu = b.gpu;
