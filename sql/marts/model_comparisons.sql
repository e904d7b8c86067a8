-- model_comparisons: two models on one task and GPU, at each boundary: "A uses k× B", k = A's index
-- figure over B's (index_rows_v2), with the interval of k from both figures' repeat ranges: A's lowest
-- repeat over B's highest to A's highest over B's lowest (a figure measured once is its own range). At
-- the server and facility boundaries both figures take the same GPU's factors (boundary_factor_ranges'
-- central figures), which cancel in k: the boundary changes the Wh, not the ratio.
-- grain: one row per task × GPU × boundary × ordered pair of distinct models with an index row on the GPU
-- key: task, gpu, boundary, model_a, model_b
create or replace view model_comparisons as

with
figures as (
    select
        r.task, r.gpu, r.model_id, r.slug, r.unit_label, r.n_repeats, r.wh_per_unit,
        coalesce(r.range_low, r.wh_per_unit) as repeat_low,
        coalesce(r.range_high, r.wh_per_unit) as repeat_high,
        r.server_factor_central, r.facility_factor_central
    from index_rows_v2 as r
),

-- figures is named once on each side of the join: DuckDB before 1.3 computes a CTE (here index_rows_v2)
-- again wherever it is named, and a union of three took 1.1 seven seconds on the eleven snapshots.
at_boundaries as (
    select
        f.*, b.boundary, b.boundary_position,
        case b.boundary
            when 'gpu_only' then 1.0
            when 'server' then f.server_factor_central
            else f.server_factor_central * f.facility_factor_central
        end as multiplier
    from figures as f
    cross join (values ('gpu_only', 1), ('server', 2), ('facility', 3)) as b(boundary, boundary_position)
)

select
    a.task, a.gpu, a.boundary, a.boundary_position, a.unit_label,
    a.model_id as model_a, b.model_id as model_b, a.slug as slug_a, b.slug as slug_b,
    a.wh_per_unit * a.multiplier as wh_per_unit_a, b.wh_per_unit * b.multiplier as wh_per_unit_b,
    a.wh_per_unit / b.wh_per_unit as energy_ratio,
    a.repeat_low / b.repeat_high as energy_ratio_low,
    a.repeat_high / b.repeat_low as energy_ratio_high,
    a.n_repeats as n_repeats_a, b.n_repeats as n_repeats_b
from at_boundaries as a
join at_boundaries as b
    on b.task = a.task and b.gpu = a.gpu and b.boundary = a.boundary and b.model_id <> a.model_id;
