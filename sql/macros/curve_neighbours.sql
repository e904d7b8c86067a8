-- curve_neighbours: macro; the measured points of one efficiency curve either side of a concurrency, an
-- aggregate over the curve's points: select curve_neighbours(x, wh_per_unit, 100) ... group by deployment.
-- It is how energy_at_concurrency and fleet_plan read a curve, defined once. x: each point's concurrency,
-- unique on the curve (configurations of a deployment measured at the same concurrency averaged into one
-- point first); point: what is interpolated, a figure or a struct of them. lower_x and lower: the point
-- with the highest x at or below the concurrency; upper_x and upper: the lowest at or above it (both the
-- same point where one was measured there); null beyond the curve's ends. curve_position says where the
-- concurrency lies between them.
create or replace macro curve_neighbours(x, point, concurrency) as {
    lower_x: max(x) filter (where x <= concurrency),
    upper_x: min(x) filter (where x >= concurrency),
    lower: arg_max_null(point, x) filter (where x <= concurrency),
    upper: arg_min_null(point, x) filter (where x >= concurrency)
};
