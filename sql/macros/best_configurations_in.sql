-- best_configurations_in: table macro; for one snapshot (null: every snapshot), the lowest-energy
-- configuration of each model on each GPU within the task's latency limit, ties broken by
-- unified_configurations' preference. The build stores its rows once per snapshot as the table
-- best_configuration_history: select * from best_configurations_in('<snapshot id>').
-- grain: one row per snapshot × task × model × GPU that has a configuration within the limit
-- key: snapshot_id, task, model_id, gpu
-- An id the database does not hold is an error naming it and the nearest ids, not an empty answer.
create or replace macro best_configurations_in(of_snapshot) as table

with
ranked as (
    select
        *,
        row_number() over (partition by snapshot_id, task, model_id, gpu order by preference) as rank_within_gpu
    from unified_configurations
    where is_within_latency_limit and (of_snapshot is null or snapshot_id = checked_snapshot_id(of_snapshot))
)

select * exclude (
    joules_per_unit, batch_limit, units_per_second, is_within_latency_limit, in_index_snapshot, preference,
    rank_within_gpu
)
from ranked
where rank_within_gpu = 1;
