-- audit_findings: plausibility findings that do not block a build, one per rule breach.
-- grain: one row per snapshot × rule × offending row (or configuration, for repeats)
-- key: snapshot_id, rule, row_key
-- Tolerances, directions and reasons live in pipeline/audit_rules.toml (loaded as audit_rules).
create or replace view audit_findings as

with
observations as (
    select
        snapshot_id, 'token_configurations' as table_name, 'energy_per_token_vs_power_over_throughput' as rule,
        task || ':' || row_id || '#' || repeat as row_key,
        joules_per_output_token * tokens_per_second / gpu_power_watts_total as observed
    from configuration_history
    union all
    select
        snapshot_id, 'diffusion_configurations', 'diffusion_energy_vs_power_latency',
        task || ':' || row_id || '#' || repeat,
        joules_per_output / (gpu_power_watts_total * batch_latency_s / batch_size)
    from diffusion_configuration_history
    union all
    select
        snapshot_id, 'token_configurations', 'repeat_measurements_disagree', task || ':' || row_id,
        max(joules_per_output_token) / min(joules_per_output_token) - 1
    from configuration_history
    group by snapshot_id, task, row_id
    having count(*) > 1
    union all
    select
        snapshot_id, 'token_configurations', 'itl_tail_ratio', task || ':' || row_id || '#' || repeat,
        p99_itl_ms / median_itl_ms
    from configuration_history
    union all
    select
        c.snapshot_id, c.family || '_configurations', 'gpu_power_fraction',
        c.task || ':' || c.row_id || '#' || c.repeat,
        c.gpu_power_watts_total / (c.num_gpus * g.rated_board_power_w)
    from unified_configurations as c
    join gpu_ratings as g on g.gpu = c.gpu
    union all
    select
        snapshot_id,
        case
            when match_status = 'detail file only' then 'model_detail_configurations'
            when task like 'text-to-%' then 'diffusion_configurations'
            else 'token_configurations'
        end,
        'detail_row_unmatched',
        task || ':' || model_id || ':' || configuration || '#' || repeat || ' (' || match_status || ')',
        1.0
    from model_detail_matches
    where match_status != 'matched'
)

select
    o.snapshot_id, o.table_name, o.row_key, o.rule, r.severity, o.observed,
    audit_expected(r.direction, r.tolerance) as expected
from observations as o
join audit_rules as r on r.rule = o.rule
where case r.direction
    when 'around_one' then o.observed not between 1 - r.tolerance and 1 + r.tolerance
    when 'at_least' then o.observed < r.tolerance
    else o.observed > r.tolerance
end;
