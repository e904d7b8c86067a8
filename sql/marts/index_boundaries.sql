-- index_boundaries: each index figure (best_configurations) at three boundaries: gpu_only (the figure
-- itself: GPU energy only, as measured), server (the GPU figure × the server factor: host CPU, memory,
-- network interface, idle capacity kept for peaks) and facility (the server figure × the facility
-- factor, PUE), low with low and high with high, each factor as derived for the row's GPU. The factors are assumptions from the sources in
-- boundary_factors (ranges: boundary_factor_ranges), not measurements.
-- grain: one row per best_configurations row × boundary (gpu_only, server, facility)
-- key: task, model_id, gpu, boundary
create or replace view index_boundaries as

select
    b.task, b.model_id, b.gpu, b.row_id, b.boundary, b.boundary_position, b.unit_label, b.wh_per_unit,
    b.wh_per_unit_low, b.wh_per_unit_central, b.wh_per_unit_high
from index_boundary_history as b
join index_snapshot on index_snapshot.snapshot_id = b.snapshot_id;
