-- audit_findings: plausibility findings that do not block a build, one per rule breach.
-- grain: one row per snapshot × rule × offending row (or configuration, for repeats)
-- key: (snapshot_id, rule, row_key)
-- Tolerances and reasons live in pipeline/audit_rules.toml (loaded as audit_rules).
create or replace view audit_findings as

with

rules as (
    select * from audit_rules
),

-- A limit as text: six decimals, trailing zeros and point dropped (0.95, 20, 0). DuckDB and Spark print
-- a decimal alike, unlike printf's %g (Java's pads it: 0.00000); for limits of at most six decimals it
-- is what %g writes.
limits as (
    select
        rules.*,
        trim(trailing '.' from trim(trailing '0' from cast(cast(1 - tolerance as decimal(18, 6)) as varchar)))
            as lower_text,
        trim(trailing '.' from trim(trailing '0' from cast(cast(1 + tolerance as decimal(18, 6)) as varchar)))
            as upper_text,
        trim(trailing '.' from trim(trailing '0' from cast(cast(tolerance as decimal(18, 6)) as varchar)))
            as tolerance_text,
    from rules
),

token as (
    select * from configuration_history
),

diffusion as (
    select * from diffusion_configuration_history
),

powered as (
    select snapshot_id, 'token_configurations' as table_name, task, row_id, repeat, gpu, num_gpus, gpu_power_watts_total
    from token
    union all
    select snapshot_id, 'diffusion_configurations', task, row_id, repeat, gpu, num_gpus, gpu_power_watts_total
    from diffusion
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
        p.table_name,
        'gpu_power_fraction' as rule,
        p.task || ':' || p.row_id || '#' || p.repeat as row_key,
        p.gpu_power_watts_total / (p.num_gpus * g.rated_board_power_w) as observed,
    from powered as p
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
        case r.direction
            when 'around_one' then r.lower_text || ' to ' || r.upper_text
            when 'at_least' then 'at least ' || r.tolerance_text
            else 'at most ' || r.tolerance_text
        end as expected,
    from observations as o
    join limits as r on r.rule = o.rule
),

findings as (
    select * exclude (is_breach)
    from judged
    where is_breach
)

select * from findings;
