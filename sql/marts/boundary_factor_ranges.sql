-- boundary_factor_ranges: per boundary, the multiplier's range over its sources in boundary_factors:
-- the smallest factor_low, the central row's factor_central and the largest factor_high. server
-- multiplies GPU energy (host CPU, memory, network interface, idle capacity kept for peaks); facility
-- multiplies server energy (PUE). Assumptions from the cited sources, not measurements.
-- grain: one row per boundary (server, facility)
-- key: boundary
create or replace view boundary_factor_ranges as

select
    boundary,
    min(factor_low) as factor_low,
    max(case when central then factor_central end) as factor_central,
    max(factor_high) as factor_high,
    count(*) as source_count,
    max(case when central then source end) as central_source
from boundary_factors
group by boundary;
