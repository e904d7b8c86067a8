-- energy_per_functional_unit: each index figure at each boundary (index_boundaries, low, central and
-- high) as energy per functional unit in kWh, the R of a Software Carbon Intensity (SCI for AI)
-- calculation: per output token for the token tasks, per image, and per video and per second of
-- generated video (num_frames ÷ fps of the index configuration). Operational energy only: carbon
-- needs a grid intensity, and embodied emissions are not in it.
-- grain: one row per index_boundaries row × functional unit (token tasks: output token; text-to-image:
--   image; text-to-video: video and video-second)
-- key: task, model_id, gpu, boundary, functional_unit
create or replace view energy_per_functional_unit as

with
figures as (
    select
        b.task, b.model_id, b.gpu, b.row_id, b.boundary, b.boundary_position, b.unit_label,
        b.wh_per_unit_low, b.wh_per_unit_central, b.wh_per_unit_high, c.family,
        -- seconds of video per video; null for images
        cast(c.num_frames as double) / c.fps as video_seconds
    from index_boundaries as b
    join best_configurations as c on c.task = b.task and c.model_id = b.model_id and c.gpu = b.gpu
),

functional_units as (
    -- token figures are per million output tokens
    select *, 'output token' as functional_unit, cast(1000000 as double) as functional_units_per_index_unit
    from figures where family = 'token'
    union all
    select *, unit_label, cast(1 as double) from figures where family = 'diffusion'
    union all
    select *, 'video-second', video_seconds from figures where family = 'diffusion' and video_seconds is not null
)

select
    task, model_id, gpu, row_id, boundary, boundary_position, functional_unit, functional_units_per_index_unit,
    -- Wh per index unit ÷ functional units in it ÷ 1,000 Wh per kWh
    wh_per_unit_low / functional_units_per_index_unit / 1000 as kwh_per_functional_unit_low,
    wh_per_unit_central / functional_units_per_index_unit / 1000 as kwh_per_functional_unit_central,
    wh_per_unit_high / functional_units_per_index_unit / 1000 as kwh_per_functional_unit_high
from functional_units;
