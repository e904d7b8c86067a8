-- boundary_multipliers: per GPU and boundary, what multiplies a GPU-energy figure to reach that boundary:
-- 1 at gpu_only (GPU energy only, as measured), the server factor at server, the server factor × the
-- facility factor at facility (a wider boundary multiplies the factors of those inside it), low with low
-- and high with high, each factor as derived for the GPU (boundary_factor_ranges). A GPU measured in some
-- snapshot but without a rated board power in gpu_ratings has no factors: its server and facility
-- multipliers are null.
-- grain: one row per GPU (of gpu_ratings or measured in any snapshot) × boundary (gpu_only, server, facility)
-- key: gpu, boundary
-- stored: a few rows, computed once per build; estimate and plan read them for every question.
create or replace view boundary_multipliers as

with
gpus as (
    select gpu from gpu_ratings
    union
    select distinct gpu from unified_configurations
),

-- Each GPU's two factors side by side (Spark has no product aggregate to multiply them in a group).
factors as (
    select
        gpu,
        max(case when boundary = 'server' then factor_low end) as server_low,
        max(case when boundary = 'server' then factor_central end) as server_central,
        max(case when boundary = 'server' then factor_high end) as server_high,
        max(case when boundary = 'facility' then factor_low end) as facility_low,
        max(case when boundary = 'facility' then factor_central end) as facility_central,
        max(case when boundary = 'facility' then factor_high end) as facility_high
    from boundary_factor_ranges
    group by gpu
)

select
    g.gpu, b.boundary, b.boundary_position,
    case b.boundary when 'gpu_only' then 1.0 when 'server' then f.server_low else f.server_low * f.facility_low end
        as multiplier_low,
    case b.boundary
        when 'gpu_only' then 1.0 when 'server' then f.server_central else f.server_central * f.facility_central
    end as multiplier_central,
    case b.boundary when 'gpu_only' then 1.0 when 'server' then f.server_high else f.server_high * f.facility_high end
        as multiplier_high
from gpus as g
cross join (values ('gpu_only', 1), ('server', 2), ('facility', 3)) as b(boundary, boundary_position)
left join factors as f on f.gpu = g.gpu;
