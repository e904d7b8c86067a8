-- fleet_plan_unchecked: table macro; the rows of fleet_plan for a task, model id, GPU and latency metric
-- exactly as the index snapshot spells them, unchecked: a name it does not have gives no rows, a latency
-- metric of the other task family no plan. energy-index plan reads it, resolving its names and checking
-- the metric's family itself.
-- grain: one row per model × GPU the index snapshot measured for the task × boundary (gpu_only, server, facility)
-- key: model_id, gpu, boundary
-- Demand is outputs_per_day (output tokens, images or videos a day) or, for token tasks, requests_per_second
-- times the model's measured mean output length on the task (the mean of its configurations'
-- avg_output_tokens) times 86,400. The candidates on a GPU are its measured configurations
-- (configuration_curves: repeats averaged) whose latency_metric is at most latency_limit. For each, the
-- replicas are the fewest whose measured throughput serves the demand, ceil(demand / (86,400 ×
-- units_per_second)); each replica then carries load_fraction = demand / (replicas × 86,400 ×
-- units_per_second) of its measured throughput, at replica_concurrency = load_fraction × its measured
-- concurrency (Little's law at the configuration's measured time per request; requests finish sooner at
-- a lower load, so the concurrency is if anything lower). The energy
-- per output there is the deployment's measured curve at that concurrency, read as energy_at_concurrency
-- reads it (curve_neighbours, curve_position: linear in log concurrency, never extrapolated: below the
-- curve's lowest point there is no figure), held between the configuration's own full-load figure and
-- every replica drawing its measured power (method says where a bound holds it). The plan on a GPU is
-- the candidate with the lowest such energy (then fewer GPUs, then the row_id); a candidate with a figure
-- before one without. Energy a day is demand × that energy per output; average power is that over 24 h;
-- both times the GPU's boundary multipliers (low, central, high: boundary_multipliers; a wider boundary
-- multiplies the factors of those inside it). A GPU with no configuration within the limit gives a row
-- that says so, with the lowest latency measured there; a GPU without boundary factors (no rated board
-- power in gpu_ratings) has no plan at server and facility. A null model plans every model of the task.
create or replace macro fleet_plan_unchecked(
    task_name, model, outputs_per_day, latency_metric_name, latency_limit,
    gpu_name := null, requests_per_second := null, carbon_intensity := null
) as table

with
-- The question, each argument read once: fleet_plan passes its checks of them here.
asked as materialized (
    select
        task_name as asked_task, model as asked_model, gpu_name as asked_gpu,
        latency_metric_name as asked_metric, cast(latency_limit as double) as asked_limit,
        cast(outputs_per_day as double) as asked_outputs_per_day,
        cast(requests_per_second as double) as asked_requests_per_second,
        cast(carbon_intensity as double) as asked_carbon_intensity
),

-- The index snapshot's configurations of the model (every model: model null) on every GPU asked, each
-- with its repeats' means, its deployment's curve and the model's mean output length (configuration_curves),
-- the latency asked beside them; the demand in outputs a day.
points as (
    select
        c.family, c.task, c.model_id, c.slug, c.gpu, c.row_id, c.num_gpus, c.tensor_parallel, c.data_parallel,
        c.expert_parallel, c.ulysses_degree, c.ring_degree, c.precision, c.width, c.height, c.num_frames, c.fps,
        c.inference_steps, c.batch_limit, c.unit_label, c.wh_per_unit, c.measured_concurrency,
        case a.asked_metric
            when 'median_itl_ms' then c.median_itl_ms
            when 'p90_itl_ms' then c.p90_itl_ms
            when 'p99_itl_ms' then c.p99_itl_ms
            when 'batch_latency_s' then c.batch_latency_s
        end as latency,
        c.units_per_second, c.gpu_power_watts_total, curve_points_of(c.curve) as curve, c.mean_output_tokens,
        case when c.family = 'token' then 1e6 else 1 end as unit_scale,
        coalesce(a.asked_outputs_per_day, a.asked_requests_per_second * 86400 * c.mean_output_tokens) as units_per_day,
        a.*
    from configuration_curves as c, asked as a
    where c.task = a.asked_task and (a.asked_model is null or c.model_id = a.asked_model)
        and (a.asked_gpu is null or c.gpu = a.asked_gpu)
),

-- Each configuration with the fewest replicas whose measured throughput serves the demand (ceil() of a
-- quotient may land one replica short by rounding; one more then).
measured as (
    select
        *,
        -- (false, never null, where a snapshot lacks the metric: a null would sort by the session's null order)
        coalesce(latency <= asked_limit, false) as within_limit,
        cast(ceil(units_per_day / (86400 * units_per_second))
            + case when ceil(units_per_day / (86400 * units_per_second)) * 86400 * units_per_second
                < units_per_day then 1 else 0 end as bigint) as replicas
    from points
),

loaded as (
    select
        *,
        units_per_day / (replicas * 86400 * units_per_second) as load_fraction,
        measured_concurrency * units_per_day / (replicas * 86400 * units_per_second) as replica_concurrency,
        -- Every replica drawing the configuration's measured power all day, per output served.
        replicas * gpu_power_watts_total * 24 / (units_per_day / unit_scale) as at_measured_power_wh_per_unit
    from measured
),

-- The deployment's curve read at each replica's concurrency, and where it falls on it (once: read for the
-- figure and for the method).
positioned as (
    select *, curve_position(neighbours, replica_concurrency) as position
    from (
        select
            * exclude (curve), curve[1].x as lowest_measured,
            curve_neighbours(curve, replica_concurrency) as neighbours
        from loaded
    )
),

on_curve as (
    select
        * exclude (neighbours, position),
        neighbours.lower + (neighbours.upper - neighbours.lower) * position.weight as curve_wh_per_unit,
        position.method as curve_method
    from positioned
),

-- The curve's figure held between two bounds the configuration's own measurement sets: a replica at part
-- load uses no less per output than at the load it was measured at (the full-load figure), and draws no
-- more than its measured power. The curve can leave them, since neighbouring points are separate
-- measurements: in the newest snapshot power falls as concurrency rises in about a quarter of them.
-- The plan on each GPU: the configuration within the limit with the lowest such figure; a GPU with none
-- keeps one row, outside the limit, to say so. Materialized: read twice, and DuckDB before 1.3 computes a
-- CTE again wherever it is named.
chosen as materialized (
    select
        *,
        case
            when curve_wh_per_unit is null then 'below measured range'
            when curve_wh_per_unit > at_measured_power_wh_per_unit then 'held at measured power'
            when curve_wh_per_unit < wh_per_unit then 'held at the full-load figure'
            else curve_method
        end as method,
        -- (greatest and least pass over a null: below the measured range there is no figure)
        case when curve_wh_per_unit is not null
            then least(greatest(curve_wh_per_unit, wh_per_unit), at_measured_power_wh_per_unit) end as wh_at_load,
        -- what a GPU without a plan reports (over the GPU's every configuration: one window with the choice)
        min(latency) over (by_preference rows between unbounded preceding and unbounded following)
            as lowest_latency
    from on_curve
    window by_preference as (
        partition by model_id, gpu
        order by not within_limit, wh_at_load is null, wh_at_load, replicas * num_gpus, row_id
    )
    qualify row_number() over by_preference = 1
),

planned as (
    select
        g.task, g.model_id, g.slug, g.gpu, b.boundary, b.boundary_position, g.unit_label,
        cast(g.units_per_day as double) as units_per_day, g.asked_requests_per_second as requests_per_second,
        g.mean_output_tokens,
        g.asked_metric as latency_metric,
        -- one unit a column: milliseconds for the ITL metrics, seconds for batch latency
        case when g.asked_metric <> 'batch_latency_s' then g.asked_limit end as latency_limit_ms,
        case when g.asked_metric = 'batch_latency_s' then g.asked_limit end as latency_limit_s,
        case when g.asked_metric <> 'batch_latency_s' then g.lowest_latency end as lowest_latency_ms,
        case when g.asked_metric = 'batch_latency_s' then g.lowest_latency end as lowest_latency_s,
        case
            when c.row_id is null then 'no configuration within the limit'
            when b.multiplier_central is null then 'no boundary factors'
            when g.wh_at_load is null then 'below the measured range'
            else 'planned'
        end as plan_status,
        c.row_id, c.num_gpus, c.tensor_parallel, c.data_parallel, c.expert_parallel, c.ulysses_degree,
        c.ring_degree, c.precision, c.width, c.height, c.num_frames, c.fps, c.inference_steps, c.batch_limit,
        case when g.asked_metric <> 'batch_latency_s' then c.latency end as latency_ms,
        case when g.asked_metric = 'batch_latency_s' then c.latency end as latency_s,
        c.measured_concurrency, c.units_per_second, c.gpu_power_watts_total,
        c.replicas, c.replicas * c.num_gpus as gpus, c.load_fraction, c.replica_concurrency, c.method,
        c.lowest_measured,
        b.multiplier_low as boundary_factor_low, b.multiplier_central as boundary_factor_central,
        b.multiplier_high as boundary_factor_high,
        c.wh_at_load * b.multiplier_central as wh_per_unit,
        c.wh_per_unit * b.multiplier_central as full_load_wh_per_unit,
        -- Wh per million tokens (or per image, video) to kWh: units a day in the unit's count, / 1000.
        c.units_per_day / c.unit_scale * c.wh_per_unit / 1000 * b.multiplier_central as full_load_kwh_per_day,
        c.replicas * c.gpu_power_watts_total * 24 / 1000 * b.multiplier_central as measured_power_kwh_per_day,
        c.units_per_day / c.unit_scale * c.wh_at_load / 1000 * b.multiplier_low as kwh_per_day_low,
        c.units_per_day / c.unit_scale * c.wh_at_load / 1000 * b.multiplier_central as kwh_per_day_central,
        c.units_per_day / c.unit_scale * c.wh_at_load / 1000 * b.multiplier_high as kwh_per_day_high,
        g.asked_carbon_intensity
    from chosen as g
    join boundary_multipliers as b using (gpu)
    -- the choice again where it is within the limit: a GPU without one keeps its row, without a configuration
    left join (select * from chosen where within_limit) as c using (model_id, gpu)
),

ranked as (
    select
        * exclude (asked_carbon_intensity),
        kwh_per_day_low / 24 as power_kw_low,
        kwh_per_day_central / 24 as power_kw_central,
        kwh_per_day_high / 24 as power_kw_high,
        kwh_per_day_low * asked_carbon_intensity as gco2e_per_day_low,
        kwh_per_day_central * asked_carbon_intensity as gco2e_per_day_central,
        kwh_per_day_high * asked_carbon_intensity as gco2e_per_day_high,
        asked_carbon_intensity as carbon_intensity,
        case when plan_status = 'planned' then row_number() over by_energy end as energy_rank,
        -- the plan first by fewest GPUs, then energy (the GPU, unique, breaks ties), in the same window
        case when plan_status = 'planned' then {gpus: gpus, kwh: kwh_per_day_central, gpu: gpu}
            = min({gpus: gpus, kwh: kwh_per_day_central, gpu: gpu}) filter (where plan_status = 'planned')
                over (by_energy rows between unbounded preceding and unbounded following)
        end as is_fewest_gpus
    from planned
    window by_energy as (
        partition by model_id, boundary order by plan_status <> 'planned', kwh_per_day_central, gpus, gpu
    )
)

select * from ranked
order by lower(model_id), model_id, boundary_position, energy_rank nulls last, gpus nulls last, gpu;
