-- data_version: what the database holds, for a "data as of" tile: the index snapshot, its upstream
-- commit and commit time, the date it was retrieved (as the build states it, the index files'
-- source.retrieved: --retrieved where given, else the day of the fetch) and the upstream's compile date,
-- and the version of energy-index that built the database.
-- grain: one row
-- key: snapshot_id
create or replace view data_version as

select
    s.snapshot_id, s.commit, s.commit_time,
    -- the build's --retrieved, which the index files give as source.retrieved: one date for both
    coalesce(p.retrieved, cast(s.retrieved as date)) as retrieved,
    s.last_updated, p.project_version
from index_snapshot as i
join snapshot_history as s on s.snapshot_id = i.snapshot_id
cross join build_parameters as p;
