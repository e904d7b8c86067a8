-- boundary_multipliers: per GPU and boundary, what multiplies a GPU-energy figure to reach that boundary:
-- 1 at gpu_only (GPU energy only, as measured), the server factor at server, the server factor × the
-- facility factor at facility (a wider boundary multiplies the factors of those inside it), low with low
-- and high with high, each factor as derived for the GPU (boundary_factor_ranges). A GPU measured in some
-- snapshot but without a rated board power in gpu_ratings has no factors: its server and facility
-- multipliers are null, and factor_count says how many it has.
-- grain: one row per GPU (of gpu_ratings or measured in any snapshot) × boundary (gpu_only, server, facility)
-- key: gpu, boundary
-- stored: a few rows, computed once per build; estimate and plan read them for every question.
create or replace view boundary_multipliers as

with gpus as (
    select gpu from gpu_ratings
    union
    select distinct gpu from unified_configurations
)

select
    g.gpu, b.boundary, b.boundary_position,
    -- a boundary needs the factors of every boundary inside it and its own: none, one or two
    case when count(r.boundary) = b.boundary_position - 1 then coalesce(product(r.factor_low), 1) end
        as multiplier_low,
    case when count(r.boundary) = b.boundary_position - 1 then coalesce(product(r.factor_central), 1) end
        as multiplier_central,
    case when count(r.boundary) = b.boundary_position - 1 then coalesce(product(r.factor_high), 1) end
        as multiplier_high,
    count(r.boundary) as factor_count
from gpus as g
cross join (values ('gpu_only', 1), ('server', 2), ('facility', 3)) as b(boundary, boundary_position)
left join boundary_factor_ranges as r
    on r.gpu = g.gpu and (
        (r.boundary = 'server' and b.boundary_position >= 2)
        or (r.boundary = 'facility' and b.boundary_position = 3)
    )
group by g.gpu, b.boundary, b.boundary_position;
