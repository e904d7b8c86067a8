-- task_summaries: per task, its configuration counts and those over the latency limit, as the index's provenance cites.
-- grain: one row per task of the index snapshot
-- key: task
create or replace view task_summaries as

select
    snapshot_id, task, family,
    count(*) as configuration_count,
    count(*) filter (where not is_within_latency_limit) as over_latency_limit_count
from unified_configurations
where in_index_snapshot
group by snapshot_id, task, family;
