-- index_rows_v2: what the index files' version 2 adds to each index row (best_configurations): the
-- range from the configuration's repeats (null when measured once), the runner-up and its relative
-- margin, the figure at the three boundaries with the factors used and the boundary_factors rows that
-- set them (each as derived for the row's GPU), the validity codes (index_validity, joined by ', '),
-- the stability and latency-tail ratios they test, the figure's departure from its deployment's fitted
-- energy curve (index_curve_checks), the energy class on ComparIA's scale (index_energy_classes: token
-- tasks, at the facility boundary, central with the letters low and high; null for diffusion tasks, whose
-- unit has no tokens, and for a GPU without boundary factors, each saying why) and Wh per response at the
-- measured mean output length (token tasks; diffusion: one image or video a response): at gpu_only with
-- the repeats' range, and at the server and facility boundaries, low, central and high.
-- grain: one row per best_configurations row
-- key: task, model_id, gpu
create or replace view index_rows_v2 as

with
-- The codes as one text, joined by ', ' (a list column reaches SQLAlchemy and BI tools untyped); the
-- export writes them as the files' JSON list ([exports.index_v2]).
codes as (
    select task, model_id, gpu, string_agg(code, ', ' order by position) as validity_codes
    from index_validity
    group by task, model_id, gpu
),

rows_with_ratios as (
    select
        u.*,
        c.avg_batch_size / c.max_num_seqs as stability_ratio,
        c.p99_itl_ms / c.median_itl_ms as latency_tail_ratio,
        c.avg_output_tokens,
        -- Wh per unit to Wh per response: a million tokens over the mean output length; one diffusion output
        case when u.family = 'token' then c.avg_output_tokens / 1e6 else 1.0 end as responses_per_unit
    from index_uncertainty as u
    left join configurations as c
        on c.task = u.task and c.row_id = u.row_id and c.repeat = u.repeat
)

select
    r.snapshot_id, r.family, r.task, r.model_id, r.slug, r.gpu, r.row_id, r.repeat, r.unit_label,
    r.wh_per_unit, r.n_repeats,
    case when r.n_repeats > 1 then r.wh_repeat_min end as range_low,
    case when r.n_repeats > 1 then r.wh_repeat_max end as range_high,
    r.runner_up_row_id, r.runner_up_wh_per_unit, r.margin_relative,
    -- gpu_only is the figure itself, whether or not the GPU has factors for the other boundaries.
    r.wh_per_unit as gpu_only_low, r.wh_per_unit as gpu_only_central, r.wh_per_unit as gpu_only_high,
    b.server_wh_per_unit_low as server_low, b.server_wh_per_unit_central as server_central,
    b.server_wh_per_unit_high as server_high,
    b.facility_wh_per_unit_low as facility_low, b.facility_wh_per_unit_central as facility_central,
    b.facility_wh_per_unit_high as facility_high,
    s.factor_low as server_factor_low, s.factor_central as server_factor_central,
    s.factor_high as server_factor_high, s.low_source as server_low_source,
    s.central_source as server_central_source, s.high_source as server_high_source,
    f.factor_low as facility_factor_low, f.factor_central as facility_factor_central,
    f.factor_high as facility_factor_high, f.low_source as facility_low_source,
    f.central_source as facility_central_source, f.high_source as facility_high_source,
    coalesce(k.validity_codes, '') as validity_codes,
    r.stability_ratio, r.latency_tail_ratio,
    c.fit_status, c.curve_wh_per_unit, c.curve_departure, c.curve_departure_bound,
    e.energy_class, e.energy_class_low, e.energy_class_high, e.energy_class_span,
    case
        when r.family <> 'token'
            then 'no class: the scale is defined in Wh per million output tokens, and an image or video has no output tokens'
        when e.energy_class is null
            then 'no class: the scale applies at the ' || (select min(boundary) from energy_classes)
                || ' boundary, and the row''s GPU has no boundary factors to give a figure there'
    end as energy_class_reason,
    r.avg_output_tokens,
    r.wh_per_unit * r.responses_per_unit as per_response_wh,
    case when r.n_repeats > 1 then r.wh_repeat_min * r.responses_per_unit end as per_response_low,
    case when r.n_repeats > 1 then r.wh_repeat_max * r.responses_per_unit end as per_response_high,
    b.server_wh_per_unit_low * r.responses_per_unit as per_response_server_low,
    b.server_wh_per_unit_central * r.responses_per_unit as per_response_server_central,
    b.server_wh_per_unit_high * r.responses_per_unit as per_response_server_high,
    b.facility_wh_per_unit_low * r.responses_per_unit as per_response_facility_low,
    b.facility_wh_per_unit_central * r.responses_per_unit as per_response_facility_central,
    b.facility_wh_per_unit_high * r.responses_per_unit as per_response_facility_high
from rows_with_ratios as r
-- A GPU without boundary factors (no rating) keeps its row, its server and facility boundaries null
-- (validity code no_boundary_factors).
left join index_boundary_columns as b
    on b.snapshot_id = r.snapshot_id and b.task = r.task and b.model_id = r.model_id and b.gpu = r.gpu
left join boundary_factor_ranges as s on s.boundary = 'server' and s.gpu = r.gpu
left join boundary_factor_ranges as f on f.boundary = 'facility' and f.gpu = r.gpu
left join codes as k on k.task = r.task and k.model_id = r.model_id and k.gpu = r.gpu
left join index_curve_checks as c on c.task = r.task and c.model_id = r.model_id and c.gpu = r.gpu
left join index_energy_classes as e
    on e.snapshot_id = r.snapshot_id and e.task = r.task and e.model_id = r.model_id and e.gpu = r.gpu;
