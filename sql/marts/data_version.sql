-- data_version: what the database holds, for a "data as of" tile: the index snapshot, its upstream
-- commit and commit time, the date it was retrieved and the upstream's compile date, and the version
-- of energy-index that built the database.
-- grain: one row
-- key: snapshot_id
create or replace view data_version as

select
    s.snapshot_id, s.commit, s.commit_time, s.retrieved, s.last_updated, p.project_version
from index_snapshot as i
join snapshot_history as s on s.snapshot_id = i.snapshot_id
cross join build_parameters as p;
