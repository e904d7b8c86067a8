-- ecologits_refit: EcoLogits' GPU-energy fit (energy per output token against active parameters, at
-- its fixed concurrency of 64) refitted on the index snapshot, per task, GPU and latency tier, beside
-- what EcoLogits' published coefficients (ecologits_coefficients) predict for the same models. Token
-- tasks only, so latency_limit (an ITL metric's limit) is in ms.
-- grain: one row per token task × GPU × latency metric × limit with at least three models measured at 64
-- key: task, gpu, latency_metric, latency_limit
-- The points: per model, the lowest-energy configuration at max_num_seqs 64 (EcoLogits' batch size)
-- within the tier, energy for all its GPUs; the fit: ordinary least squares over exact sums.
-- Boundary: GPU energy only, like EcoLogits' own GPU-energy model; EcoLogits adds its server energy and
-- PUE afterwards, so these fits take no boundary factor (boundary_factors): that would count them twice.
create or replace view ecologits_refit as

with
candidates as (
    select
        c.snapshot_id, c.task, c.gpu, c.latency_metric, t.latency_limit_ms as latency_limit, c.model_id, c.num_gpus,
        m.activated_params_billions as active_params_b, m.total_params_billions as total_params_b,
        wh_from_joules(c.joules_per_unit) as wh_per_token,
        row_number() over (
            partition by c.task, c.gpu, c.latency_metric, t.latency_limit_ms, c.model_id order by c.preference
        ) as rank_within_model,
    from configuration_latencies as c
    join models as m on m.snapshot_id = c.snapshot_id and m.model_id = c.model_id
    join latency_tiers as t on t.family = c.family and t.latency_metric = c.latency_metric
    -- a scalar subquery, not a cross join: DuckDB 1.5 fails on the latter ("expression type mismatch").
    where c.in_index_snapshot and c.family = 'token' and c.latency_ms <= t.latency_limit_ms
        and c.batch_limit = (select batch_size from ecologits_coefficients)
),

points as (
    select
        p.*,
        (k.alpha * exp(k.beta * k.batch_size) * p.active_params_b + k.gamma)
            * pow(2, ceil(log2(ceil(k.memory_overhead * p.total_params_b * k.quantization_bits / 8 / k.gpu_memory_gb))))
            as ecologits_wh_per_token,
    from candidates as p
    cross join ecologits_coefficients as k
    where p.rank_within_model = 1
),

-- Sums in exact arithmetic: each term rounded to DECIMAL(38, 24) (24 decimal places hold 12 or more
-- significant digits of every term here), then added without rounding. A parallel floating-point
-- aggregate (regr_slope) adds in whatever order the threads finish, so its last bits varied from run
-- to run; an exact sum is the same in any order.
means as (
    select
        snapshot_id, task, gpu, latency_metric, latency_limit,
        count(*) as models,
        sum(active_params_b::decimal(38, 24))::double / count(*) as mean_x,
        sum(wh_per_token::decimal(38, 24))::double / count(*) as mean_y,
    from points
    group by all
    having count(*) >= 3
),

moments as (
    select
        m.snapshot_id, m.task, m.gpu, m.latency_metric, m.latency_limit, m.models, m.mean_x, m.mean_y,
        sum(((p.active_params_b - m.mean_x) * (p.wh_per_token - m.mean_y))::decimal(38, 24))::double as sxy,
        sum(((p.active_params_b - m.mean_x) * (p.active_params_b - m.mean_x))::decimal(38, 24))::double as sxx,
        sum(((p.wh_per_token - m.mean_y) * (p.wh_per_token - m.mean_y))::decimal(38, 24))::double as syy,
    from means as m
    join points as p using (snapshot_id, task, gpu, latency_metric, latency_limit)
    group by all
),

-- Ordinary least squares as regr_slope, regr_intercept and regr_r2 define it.
fitted as (
    select
        snapshot_id, task, gpu, latency_metric, latency_limit, models,
        sxy / nullif(sxx, 0) as wh_per_token_per_billion_active,
        mean_y - mean_x * sxy / nullif(sxx, 0) as wh_per_token_intercept,
        case when sxx = 0 then null when syy = 0 then 1 else sxy * sxy / (sxx * syy) end as r_squared,
    from moments
)

select
    f.snapshot_id, f.task, f.gpu, f.latency_metric, f.latency_limit, f.models,
    f.wh_per_token_per_billion_active, f.wh_per_token_intercept, f.r_squared,
    min(p.wh_per_token - (f.wh_per_token_intercept + f.wh_per_token_per_billion_active * p.active_params_b))
        as min_residual_wh_per_token,
    max(p.wh_per_token - (f.wh_per_token_intercept + f.wh_per_token_per_billion_active * p.active_params_b))
        as max_residual_wh_per_token,
    median(p.ecologits_wh_per_token / p.wh_per_token) as ecologits_over_measured_median,
    min(p.ecologits_wh_per_token / p.wh_per_token) as ecologits_over_measured_min,
    max(p.ecologits_wh_per_token / p.wh_per_token) as ecologits_over_measured_max,
    any_value(k.batch_size) as concurrency,
from fitted as f
join points as p using (snapshot_id, task, gpu, latency_metric, latency_limit)
cross join ecologits_coefficients as k
group by all;
