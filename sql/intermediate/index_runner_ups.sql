-- index_runner_ups: per snapshot, the next-best configuration of each index row (best_configuration_history):
-- among the other configurations of the model on the GPU within the same latency limit, the one the
-- index's ranking (unified_configurations' preference) puts first.
-- grain: one row per best_configuration_history row that has another configuration within the limit
-- key: snapshot_id, task, model_id, gpu
create or replace view index_runner_ups as

with
-- Every configuration within the limit but the index's own, each by its best repeat.
others_ranked as (
    select
        c.snapshot_id, c.task, c.model_id, c.gpu, c.row_id, c.wh_per_unit, c.joules_per_unit,
        row_number() over (
            partition by c.snapshot_id, c.task, c.model_id, c.gpu order by c.preference
        ) as rank_among_others
    from unified_configurations as c
    join best_configuration_history as b
        on b.snapshot_id = c.snapshot_id and b.task = c.task and b.model_id = c.model_id and b.gpu = c.gpu
        and b.row_id != c.row_id
    where c.is_within_latency_limit
)

select
    snapshot_id, task, model_id, gpu, row_id as runner_up_row_id, wh_per_unit as runner_up_wh_per_unit,
    joules_per_unit as runner_up_joules_per_unit
from others_ranked
where rank_among_others = 1;
