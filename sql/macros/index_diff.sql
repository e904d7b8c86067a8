-- index_diff: table macro; for two snapshots, the index rows whose published figure or chosen
-- configuration changed, and the rows added or removed: select * from index_diff('<older id>', '<newer id>').
-- grain: one row per task × model × GPU whose index row differs
-- key: task, model_id, gpu
-- An id the database does not hold is an error naming it and the nearest ids, not every row added.
create or replace macro index_diff(older_id, newer_id) as table

with
pairs as (
    select checked_snapshot_id(older_id) as older_snapshot_id, checked_snapshot_id(newer_id) as newer_snapshot_id
),

sides as (
    select p.*, b.snapshot_id, b.task, b.model_id, b.slug, b.gpu, b.row_id, b.repeat, b.unit_label, b.wh_per_unit
    from pairs as p
    join best_configuration_history as b on b.snapshot_id in (p.older_snapshot_id, p.newer_snapshot_id)
),

compared as (
    select
        coalesce(o.older_snapshot_id, n.older_snapshot_id) as older_snapshot_id,
        coalesce(o.newer_snapshot_id, n.newer_snapshot_id) as newer_snapshot_id,
        coalesce(o.task, n.task) as task, coalesce(o.model_id, n.model_id) as model_id,
        coalesce(o.slug, n.slug) as slug, coalesce(o.gpu, n.gpu) as gpu,
        o.row_id as old_row_id, n.row_id as new_row_id, o.repeat as old_repeat, n.repeat as new_repeat,
        coalesce(o.unit_label, n.unit_label) as unit_label,
        o.wh_per_unit as old_wh_per_unit, n.wh_per_unit as new_wh_per_unit
    from (select * from sides where snapshot_id = older_snapshot_id) as o
    full join (select * from sides where snapshot_id = newer_snapshot_id) as n
        on n.task = o.task and n.model_id = o.model_id and n.gpu = o.gpu
),

judged as (
    select
        compared.*,
        case
            when old_row_id is null then 'added'
            when new_row_id is null then 'removed'
            when old_row_id != new_row_id or old_repeat != new_repeat then 'best configuration changed'
            when abs(new_wh_per_unit - old_wh_per_unit)
                > b.change_relative_tolerance * greatest(old_wh_per_unit, new_wh_per_unit)
                then 'figure changed'
        end as change,
        new_wh_per_unit / old_wh_per_unit - 1 as relative_change
    from compared
    cross join build_parameters as b
)

select * from judged where change is not null;
