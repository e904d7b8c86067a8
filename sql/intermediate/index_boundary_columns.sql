-- index_boundary_columns: per snapshot, each index figure at the server and facility boundaries
-- (index_boundary_history), low, central and high, as one column each: the one pivot of the boundaries
-- that index_history and index_rows_v2 read. A GPU without boundary factors has no row.
-- grain: one row per best_configuration_history row whose GPU has boundary factors
-- key: snapshot_id, task, model_id, gpu
create or replace view index_boundary_columns as

select
    snapshot_id, task, model_id, gpu,
    max(case when boundary = 'server' then wh_per_unit_low end) as server_wh_per_unit_low,
    max(case when boundary = 'server' then wh_per_unit_central end) as server_wh_per_unit_central,
    max(case when boundary = 'server' then wh_per_unit_high end) as server_wh_per_unit_high,
    max(case when boundary = 'facility' then wh_per_unit_low end) as facility_wh_per_unit_low,
    max(case when boundary = 'facility' then wh_per_unit_central end) as facility_wh_per_unit_central,
    max(case when boundary = 'facility' then wh_per_unit_high end) as facility_wh_per_unit_high
from index_boundary_history
group by snapshot_id, task, model_id, gpu;
