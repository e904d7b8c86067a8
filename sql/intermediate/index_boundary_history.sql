-- index_boundary_history: each index figure of every snapshot (best_configuration_history) at three
-- boundaries: gpu_only (the figure itself: GPU energy only, as measured), server (the GPU figure × the
-- server factor) and facility (the server figure × the facility factor, PUE), low with low and high with
-- high, each factor as derived for the row's GPU (the factors' ranges: boundary_factor_ranges).
-- grain: one row per best_configuration_history row × boundary (gpu_only, server, facility)
-- key: snapshot_id, task, model_id, gpu, boundary
create or replace view index_boundary_history as

with
server_figures as (
    select
        b.snapshot_id, b.task, b.model_id, b.gpu, b.row_id, b.unit_label, b.wh_per_unit,
        b.wh_per_unit * s.factor_low as server_low,
        b.wh_per_unit * s.factor_central as server_central,
        b.wh_per_unit * s.factor_high as server_high
    from best_configuration_history as b
    join boundary_factor_ranges as s on s.boundary = 'server' and s.gpu = b.gpu
)

select
    snapshot_id, task, model_id, gpu, row_id, 'gpu_only' as boundary, 1 as boundary_position, unit_label,
    wh_per_unit, wh_per_unit as wh_per_unit_low, wh_per_unit as wh_per_unit_central, wh_per_unit as wh_per_unit_high
from server_figures
union all
select
    snapshot_id, task, model_id, gpu, row_id, 'server', 2, unit_label, wh_per_unit,
    server_low, server_central, server_high
from server_figures
union all
select
    g.snapshot_id, g.task, g.model_id, g.gpu, g.row_id, 'facility', 3, g.unit_label, g.wh_per_unit,
    g.server_low * f.factor_low, g.server_central * f.factor_central, g.server_high * f.factor_high
from server_figures as g
join boundary_factor_ranges as f on f.boundary = 'facility' and f.gpu = g.gpu;
