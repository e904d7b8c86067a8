-- ecologits_refit: EcoLogits' GPU-energy fit (energy per output token against active parameters, at
-- its fixed concurrency of 64) refitted on the index snapshot, per task, GPU and latency tier, beside
-- what EcoLogits' published coefficients (ecologits_coefficients) predict for the same models.
-- grain: one row per token task × GPU × latency metric × limit with at least three models measured at 64
-- key: (task, gpu, latency_metric, latency_limit)
-- inputs: configurations, models, latency_tiers, ecologits_coefficients, wh_from_joules
-- The points: per model, the lowest-energy configuration at max_num_seqs 64 (EcoLogits' batch size)
-- within the tier, energy for all its GPUs; the fit: ordinary least squares (regr_slope, regr_intercept).
-- Boundary: GPU energy only, like EcoLogits' own GPU-energy model; EcoLogits adds its server energy and
-- PUE afterwards, so these fits take no boundary factor (boundary_factors): that would count them twice.
create or replace view ecologits_refit as

with

coefficients as (
    select * from ecologits_coefficients
),

candidates as (
    select
        c.snapshot_id, c.task, c.gpu, t.latency_metric, t.latency_limit, c.model_id, c.num_gpus,
        m.activated_params_billions as active_params_b, m.total_params_billions as total_params_b,
        wh_from_joules(c.joules_per_output_token) as wh_per_token,
        row_number() over (
            partition by c.snapshot_id, c.task, c.gpu, t.latency_metric, t.latency_limit, c.model_id
            order by c.joules_per_output_token, c.num_gpus, c.repeat
        ) as rank_within_model,
    from configurations as c
    join models as m on m.snapshot_id = c.snapshot_id and m.model_id = c.model_id
    join latency_tiers as t on t.family = 'token'
    cross join coefficients as k
    where c.max_num_seqs = k.batch_size
        and case t.latency_metric
            when 'median_itl_ms' then c.median_itl_ms
            when 'p90_itl_ms' then c.p90_itl_ms
            when 'p99_itl_ms' then c.p99_itl_ms
        end <= t.latency_limit
),

points as (
    select
        p.*,
        (k.alpha * exp(k.beta * k.batch_size) * p.active_params_b + k.gamma)
            * pow(2, ceil(log2(ceil(k.memory_overhead * p.total_params_b * k.quantization_bits / 8 / k.gpu_memory_gb))))
            as ecologits_wh_per_token,
    from candidates as p
    cross join coefficients as k
    where p.rank_within_model = 1
),

fitted as (
    select
        snapshot_id, task, gpu, latency_metric, latency_limit,
        count(*) as models,
        regr_slope(wh_per_token, active_params_b) as wh_per_token_per_billion_active,
        regr_intercept(wh_per_token, active_params_b) as wh_per_token_intercept,
        regr_r2(wh_per_token, active_params_b) as r_squared,
    from points
    group by all
    having count(*) >= 3
),

judged as (
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
    cross join coefficients as k
    group by all
)

select * from judged;
