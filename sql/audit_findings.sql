-- audit_findings: plausibility findings that do not block a build, one per rule breach.
-- grain: one row per snapshot × rule × offending row (or configuration, for repeats)
-- key: (snapshot_id, rule, row_key)
-- inputs: configuration_history, diffusion_configuration_history, model_detail_matches, audit_rules, gpu_ratings
-- Tolerances and reasons live in pipeline/audit_rules.toml (loaded as audit_rules).
create or replace view audit_findings as

with

rules as (
    select * from audit_rules
),

measured as (
    select * from configuration_history
),

energy_identity as (
    select
        m.snapshot_id,
        'energy_per_token_vs_power_over_throughput' as rule,
        m.task || ':' || m.row_id || '#' || m.repeat as row_key,
        m.joules_per_output_token * m.tokens_per_second / m.gpu_power_watts_total as observed,
    from measured as m
),

repeat_spread as (
    select
        m.snapshot_id,
        'repeat_measurements_disagree' as rule,
        m.task || ':' || m.row_id as row_key,
        max(m.joules_per_output_token) / min(m.joules_per_output_token) - 1 as observed,
    from measured as m
    group by m.snapshot_id, m.task, m.row_id
    having count(*) > 1
),

itl_tail as (
    select
        m.snapshot_id,
        'itl_tail_ratio' as rule,
        m.task || ':' || m.row_id || '#' || m.repeat as row_key,
        m.p99_itl_ms / m.median_itl_ms as observed,
    from measured as m
),

power_fraction as (
    select
        m.snapshot_id,
        'gpu_power_fraction' as rule,
        m.task || ':' || m.row_id || '#' || m.repeat as row_key,
        m.gpu_power_watts_total / (m.num_gpus * g.rated_board_power_w) as observed,
    from measured as m
    join gpu_ratings as g on g.gpu = m.gpu
),

diffusion_energy_identity as (
    select
        d.snapshot_id,
        'diffusion_energy_vs_power_latency' as rule,
        d.task || ':' || d.row_id || '#' || d.repeat as row_key,
        d.joules_per_output / (d.gpu_power_watts_total * d.batch_latency_s / d.batch_size) as observed,
    from diffusion_configuration_history as d
),

diffusion_power_fraction as (
    select
        d.snapshot_id,
        'gpu_power_fraction' as rule,
        d.task || ':' || d.row_id || '#' || d.repeat as row_key,
        d.gpu_power_watts_total / (d.num_gpus * g.rated_board_power_w) as observed,
    from diffusion_configuration_history as d
    join gpu_ratings as g on g.gpu = d.gpu
),

unmatched_details as (
    select
        m.snapshot_id,
        'detail_row_unmatched' as rule,
        m.task || ':' || m.model_id || ':' || m.configuration || '#' || m.repeat || ' (' || m.match_status || ')'
            as row_key,
        1.0 as observed,
    from model_detail_matches as m
    where m.match_status != 'matched'
),

observations as (
    select * from energy_identity
    union all select * from diffusion_energy_identity
    union all select * from diffusion_power_fraction
    union all select * from repeat_spread
    union all select * from itl_tail
    union all select * from power_fraction
    union all select * from unmatched_details
),

judged as (
    select
        o.snapshot_id,
        -- gpu_power_fraction covers both families; name the table the row came from.
        case
            when o.rule = 'gpu_power_fraction' and o.row_key like 'text-to-%' then 'diffusion_configurations'
            when o.rule = 'detail_row_unmatched' and o.row_key like '%(task file only)'
                then if(o.row_key like 'text-to-%', 'diffusion_configurations', 'token_configurations')
            else r.table_name
        end
            as table_name,
        o.row_key,
        o.rule,
        r.severity,
        o.observed,
        case o.rule
            when 'energy_per_token_vs_power_over_throughput' then o.observed not between 1 - r.tolerance and 1 + r.tolerance
            when 'diffusion_energy_vs_power_latency' then o.observed not between 1 - r.tolerance and 1 + r.tolerance
            when 'gpu_power_fraction' then o.observed < r.tolerance
            else o.observed > r.tolerance
        end as is_breach,
        case o.rule
            when 'energy_per_token_vs_power_over_throughput' then printf('%g to %g', 1 - r.tolerance, 1 + r.tolerance)
            when 'diffusion_energy_vs_power_latency' then printf('%g to %g', 1 - r.tolerance, 1 + r.tolerance)
            when 'gpu_power_fraction' then printf('at least %g', r.tolerance)
            else printf('at most %g', r.tolerance)
        end as expected,
    from observations as o
    join rules as r on r.rule = o.rule
),

findings as (
    select * exclude (is_breach)
    from judged
    where is_breach
)

select * from findings;

comment on view audit_findings is 'Plausibility findings that do not block a build; rules, tolerances and reasons in audit_rules.';
comment on column audit_findings.table_name is 'Table the offending row belongs to.';
comment on column audit_findings.row_key is 'task:row_id#repeat of the offending row (task:row_id for repeat comparisons).';
comment on column audit_findings.rule is 'Audit rule name; see audit_rules for its tolerance and reason.';
comment on column audit_findings.severity is 'info or warn: neither blocks a build.';
comment on column audit_findings.observed is 'The observed ratio the rule tests.';
comment on column audit_findings.expected is 'The range the rule expects the observed ratio in.';
