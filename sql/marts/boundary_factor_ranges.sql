-- boundary_factor_ranges: per boundary and GPU, the multiplier's range over its sources in
-- boundary_factors (as derived for that GPU: boundary_factors_by_gpu): the smallest factor_low, the
-- central row's factor_central and the largest factor_high, and which rows set the low and the high end.
-- server multiplies GPU energy (host CPU, memory, network interface, idle capacity kept for peaks);
-- facility multiplies server energy (PUE). Assumptions from the cited sources, not measurements.
-- grain: one row per boundary (server, facility) × GPU of gpu_ratings
-- key: boundary, gpu
create or replace view boundary_factor_ranges as

with ranged as (
    select
        *,
        min(factor_low) over (partition by boundary, gpu) as range_low,
        max(factor_high) over (partition by boundary, gpu) as range_high
    from boundary_factors_by_gpu
)

select
    boundary,
    gpu,
    min(factor_low) as factor_low,
    max(case when central then factor_central end) as factor_central,
    max(factor_high) as factor_high,
    count(*) as source_count,
    max(case when central then id end) as central_source,
    -- the first id in id order where rows tie, so that the view answers the same every time
    min(case when factor_low = range_low then id end) as low_source,
    min(case when factor_high = range_high then id end) as high_source
from ranged
group by boundary, gpu;
