-- curve_points_of: macro; an efficiency curve kept as text (configuration_curves.curve:
-- 'x:wh_per_unit,x:wh_per_unit,...' ordered by x) as the list of {x, point} curve_neighbours reads, each
-- number read back as the same bits DuckDB wrote.
create or replace macro curve_points_of(curve) as [
    {x: cast(split_part(p, ':', 1) as double), point: cast(split_part(p, ':', 2) as double)}
    for p in string_split(curve, ',')
];
