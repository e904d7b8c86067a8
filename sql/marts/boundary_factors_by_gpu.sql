-- boundary_factors_by_gpu: every boundary_factors row's multiplier on each GPU of gpu_ratings. A row that
-- quotes its factor applies it to every GPU; a row that gives the server's power besides its GPUs
-- (host_watts_per_gpu) is derived from each GPU's own rated board power, 1 + host_watts_per_gpu /
-- rated_board_power_w, rounded to two decimals as the quoted factors are: no factor derived from one
-- GPU's power is applied to another. Assumptions from the cited sources, not measurements.
-- grain: one row per boundary_factors row × GPU of gpu_ratings
-- key: id, gpu
create or replace view boundary_factors_by_gpu as

with derived as (
    select
        f.id, f.boundary, g.gpu, g.rated_board_power_w, f.host_watts_per_gpu, f.central,
        round(1 + f.host_watts_per_gpu / g.rated_board_power_w, 2) as host_factor,
        f.factor_low, f.factor_central, f.factor_high
    from boundary_factors as f
    cross join gpu_ratings as g
)

select
    id, boundary, gpu,
    coalesce(factor_low, host_factor) as factor_low,
    coalesce(factor_central, host_factor) as factor_central,
    coalesce(factor_high, host_factor) as factor_high,
    central, host_watts_per_gpu, rated_board_power_w
from derived;
