-- curve_neighbours: macro; the measured points of one efficiency curve either side of a concurrency, from
-- the curve's points as a list ordered by concurrency: curve_neighbours(list({x: x, point: wh_per_unit}
-- order by x), 100) over a group by deployment, or a curve kept as text,
-- curve_neighbours(curve_points_of(configuration_curves.curve), 100).
-- It is how energy_at_concurrency and fleet_plan read a curve, defined once. x: each point's
-- concurrency, unique on the curve (configurations of a deployment measured at the same concurrency
-- averaged into one point first); point: what is interpolated, a figure or a struct of them. lower_x and
-- lower: the point with the highest x at or below the concurrency; upper_x and upper: the lowest at or
-- above it (both the same point where one was measured there); null beyond the curve's ends.
-- curve_position says where the concurrency lies between them.
create or replace macro curve_neighbours(curve, concurrency) as {
    lower_x: [p for p in curve if p.x <= concurrency][-1].x,
    upper_x: [p for p in curve if p.x >= concurrency][1].x,
    lower: [p for p in curve if p.x <= concurrency][-1].point,
    upper: [p for p in curve if p.x >= concurrency][1].point
};
