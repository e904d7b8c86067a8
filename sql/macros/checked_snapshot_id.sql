-- checked_snapshot_id: macro; the snapshot id when the database holds that snapshot (or null), else an
-- error naming it and the nearest ids: select checked_snapshot_id('2026-02-16') fails with
-- "unknown snapshot '2026-02-16'; the nearest: 2026-02-16-7885788, ...".
create or replace macro checked_snapshot_id(snapshot) as
    checked_name('snapshot', snapshot, (select list(snapshot_id) from snapshots));
