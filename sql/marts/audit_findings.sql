-- audit_findings: plausibility findings that do not block a build, one per rule breach.
-- grain: one row per snapshot × rule × offending row (or configuration, for repeats)
-- key: (snapshot_id, rule, row_key)
-- Tolerances and reasons live in pipeline/audit_rules.toml (loaded as audit_rules).
create or replace view audit_findings as

with

token as (
    select * from configuration_history
),

diffusion as (
    select * from diffusion_configuration_history
),

energy_identity as (
    select
        snapshot_id,
        'token_configurations' as table_name,
        'energy_per_token_vs_power_over_throughput' as rule,
        task || ':' || row_id || '#' || repeat as row_key,
        joules_per_output_token * tokens_per_second / gpu_power_watts_total as observed,
    from token
),

diffusion_energy_identity as (
    select
        snapshot_id,
        'diffusion_configurations' as table_name,
        'diffusion_energy_vs_power_latency' as rule,
        task || ':' || row_id || '#' || repeat as row_key,
        joules_per_output / (gpu_power_watts_total * batch_latency_s / batch_size) as observed,
    from diffusion
),

repeat_spread as (
    select
        snapshot_id,
        'token_configurations' as table_name,
        'repeat_measurements_disagree' as rule,
        task || ':' || row_id as row_key,
        max(joules_per_output_token) / min(joules_per_output_token) - 1 as observed,
    from token
    group by snapshot_id, task, row_id
    having count(*) > 1
),

itl_tail as (
    select
        snapshot_id,
        'token_configurations' as table_name,
        'itl_tail_ratio' as rule,
        task || ':' || row_id || '#' || repeat as row_key,
        p99_itl_ms / median_itl_ms as observed,
    from token
),

power_fraction as (
    select
        p.snapshot_id,
        p.family || '_configurations' as table_name,
        'gpu_power_fraction' as rule,
        p.task || ':' || p.row_id || '#' || p.repeat as row_key,
        p.gpu_power_watts_total / (p.num_gpus * g.rated_board_power_w) as observed,
    from unified_configurations as p
    join gpu_ratings as g on g.gpu = p.gpu
),

unmatched_details as (
    select
        snapshot_id,
        case
            when match_status = 'detail file only' then 'model_detail_configurations'
            when task like 'text-to-%' then 'diffusion_configurations'
            else 'token_configurations'
        end as table_name,
        'detail_row_unmatched' as rule,
        task || ':' || model_id || ':' || configuration || '#' || repeat || ' (' || match_status || ')' as row_key,
        1.0 as observed,
    from model_detail_matches
    where match_status != 'matched'
),

observations as (
    select * from energy_identity
    union all select * from diffusion_energy_identity
    union all select * from repeat_spread
    union all select * from itl_tail
    union all select * from power_fraction
    union all select * from unmatched_details
),

judged as (
    select
        o.snapshot_id,
        o.table_name,
        o.row_key,
        o.rule,
        r.severity,
        o.observed,
        -- Each rule's direction is declared in pipeline/audit_rules.toml.
        case r.direction
            when 'around_one' then o.observed not between 1 - r.tolerance and 1 + r.tolerance
            when 'at_least' then o.observed < r.tolerance
            else o.observed > r.tolerance
        end as is_breach,
        audit_expected(r.direction, r.tolerance) as expected,
    from observations as o
    join audit_rules as r on r.rule = o.rule
),

findings as (
    select * exclude (is_breach)
    from judged
    where is_breach
)

select * from findings;
