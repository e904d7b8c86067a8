-- index_snapshot: the snapshot the index and the current-snapshot views are built from.
-- grain: one row
-- key: snapshot_id
-- stored: one row, computed once per build; estimate, plan and the current-snapshot views read it.
create or replace view index_snapshot as

select coalesce(
    (select snapshot_id from build_parameters),
    (select snapshot_id from snapshot_history order by position desc limit 1)
) as snapshot_id;
