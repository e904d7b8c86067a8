-- model_comparisons: two models on one task and GPU, at each boundary: "A uses k× B" twice, per unit
-- (output token, image or video) and per response, each k = A's index figure over B's (index_rows_v2)
-- with its interval from both figures' repeat ranges: A's lowest repeat over B's highest to A's highest
-- over B's lowest (a figure measured once is its own range). Per token and per response point opposite
-- ways when A writes much longer or shorter responses than B (is_per_response_reversed). A diffusion
-- pair of different workloads (steps, resolution, frames, fps) gets no k: workload_difference names
-- what differs, since energy per image at 50 steps and at 28 is not one quantity. At the server and
-- facility boundaries both figures take the same GPU's multiplier (boundary_multipliers' central
-- figure; null for a GPU without factors), which cancels in k: the boundary changes the Wh, not the ratio.
-- grain: one row per task × GPU × boundary × ordered pair of distinct models with an index row on the GPU
-- key: task, gpu, boundary, model_a, model_b
create or replace view model_comparisons as

with
figures as (
    select
        r.task, r.gpu, r.model_id, r.slug, r.unit_label, r.n_repeats, r.wh_per_unit,
        coalesce(r.range_low, r.wh_per_unit) as repeat_low,
        coalesce(r.range_high, r.wh_per_unit) as repeat_high,
        r.avg_output_tokens, r.per_response_wh,
        coalesce(r.per_response_low, r.per_response_wh) as per_response_repeat_low,
        coalesce(r.per_response_high, r.per_response_wh) as per_response_repeat_high,
        -- what a diffusion output is (null for token tasks, whose responses are alike in kind)
        c.width, c.height, c.num_frames, c.fps, c.inference_steps
    from index_rows_v2 as r
    join best_configurations as c on c.task = r.task and c.model_id = r.model_id and c.gpu = r.gpu
),

-- figures is named once on each side of the join: DuckDB before 1.3 computes a CTE (here index_rows_v2)
-- again wherever it is named, and a union of three took 1.1 seven seconds on the eleven snapshots.
at_boundaries as (
    select f.*, m.boundary, m.boundary_position, m.multiplier_central as multiplier
    from figures as f
    join boundary_multipliers as m on m.gpu = f.gpu
),

pairs as (
    select
        a.task, a.gpu, a.boundary, a.boundary_position, a.unit_label,
        a.model_id as model_a, b.model_id as model_b, a.slug as slug_a, b.slug as slug_b,
        a.wh_per_unit * a.multiplier as wh_per_unit_a, b.wh_per_unit * b.multiplier as wh_per_unit_b,
        a.wh_per_unit / b.wh_per_unit as unit_ratio,
        a.repeat_low / b.repeat_high as unit_ratio_low,
        a.repeat_high / b.repeat_low as unit_ratio_high,
        a.avg_output_tokens as avg_output_tokens_a, b.avg_output_tokens as avg_output_tokens_b,
        a.per_response_wh * a.multiplier as per_response_wh_a, b.per_response_wh * b.multiplier as per_response_wh_b,
        a.per_response_wh / b.per_response_wh as response_ratio,
        a.per_response_repeat_low / b.per_response_repeat_high as response_ratio_low,
        a.per_response_repeat_high / b.per_response_repeat_low as response_ratio_high,
        a.n_repeats as n_repeats_a, b.n_repeats as n_repeats_b,
        -- concat_ws skips the nulls: the parts that differ, in the order of the configuration label
        nullif(concat_ws(
            '; ',
            case when a.inference_steps is distinct from b.inference_steps
                then 'steps ' || a.inference_steps || ' vs ' || b.inference_steps end,
            case when a.width is distinct from b.width or a.height is distinct from b.height
                then 'resolution ' || a.width || 'x' || a.height || ' vs ' || b.width || 'x' || b.height end,
            case when a.num_frames is distinct from b.num_frames
                then 'frames ' || a.num_frames || ' vs ' || b.num_frames end,
            case when a.fps is distinct from b.fps then 'fps ' || a.fps || ' vs ' || b.fps end
        ), '') as workload_difference
    from at_boundaries as a
    join at_boundaries as b
        on b.task = a.task and b.gpu = a.gpu and b.boundary = a.boundary and b.model_id <> a.model_id
)

select
    task, gpu, boundary, boundary_position, unit_label, model_a, model_b, slug_a, slug_b,
    wh_per_unit_a, wh_per_unit_b,
    -- no k across workloads: the figures stand, their ratio would not mean "A uses k× B"
    case when workload_difference is null then unit_ratio end as energy_ratio,
    case when workload_difference is null then unit_ratio_low end as energy_ratio_low,
    case when workload_difference is null then unit_ratio_high end as energy_ratio_high,
    n_repeats_a, n_repeats_b,
    avg_output_tokens_a, avg_output_tokens_b, per_response_wh_a, per_response_wh_b,
    case when workload_difference is null then response_ratio end as per_response_ratio,
    case when workload_difference is null then response_ratio_low end as per_response_ratio_low,
    case when workload_difference is null then response_ratio_high end as per_response_ratio_high,
    case when workload_difference is null then (unit_ratio - 1) * (response_ratio - 1) < 0
    end as is_per_response_reversed,
    workload_difference
from pairs;
