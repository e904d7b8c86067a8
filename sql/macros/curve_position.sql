-- curve_position: macro; where a concurrency lies on an efficiency curve, from its neighbouring measured
-- points (curve_neighbours): how its figure is found (method) and the upper point's weight. The method is
-- 'measured' (a point at exactly that concurrency), 'interpolated' (between two), or 'below measured
-- range' or 'above measured range' (no figure: never extrapolated); the weight is linear in log
-- concurrency, 0 at a measured point and null outside the range, and lower + (upper - lower) * weight
-- interpolates any figure of the two points.
create or replace macro curve_position(neighbours, concurrency) as {
    method: case
        when neighbours.lower_x is null then 'below measured range'
        when neighbours.upper_x is null then 'above measured range'
        when neighbours.lower_x = neighbours.upper_x then 'measured'
        else 'interpolated'
    end,
    weight: case
        when neighbours.lower_x is null or neighbours.upper_x is null then null
        when neighbours.lower_x = neighbours.upper_x then 0.0
        else (ln(concurrency) - ln(neighbours.lower_x)) / (ln(neighbours.upper_x) - ln(neighbours.lower_x))
    end
};
