-- configuration_diff: table macro; for two snapshots, the configurations added and removed and every
-- upstream field whose value changed: select * from configuration_diff('<older id>', '<newer id>').
-- grain: one row per configuration added or removed, or per configuration × changed field
-- key: task, model_id, configuration, repeat, field
-- null in key: field
-- A macro, not a view over every pair: its cost is that of the two snapshots' rows, whatever the history.
-- Numbers compare with build_parameters.change_relative_tolerance so that re-serialising a float
-- (e.g. the upstream's derived average output length) is not a change; a null against a value is.
-- An id the database does not hold is an error naming it and the nearest ids, not every row added.
create or replace macro configuration_diff(older_id, newer_id) as table

with
pairs as (
    select checked_snapshot_id(older_id) as older_snapshot_id, checked_snapshot_id(newer_id) as newer_snapshot_id
),

pair_values as (
    select * from configuration_values
    where snapshot_id in (select older_snapshot_id from pairs union all select newer_snapshot_id from pairs)
),

configurations_in as (
    select distinct
        p.*, v.snapshot_id = p.older_snapshot_id as is_older, v.snapshot_id = p.newer_snapshot_id as is_newer,
        v.task, v.model_id, v.configuration, v.repeat
    from pairs as p
    join pair_values as v on v.snapshot_id in (p.older_snapshot_id, p.newer_snapshot_id)
),

added_or_removed as (
    (select * exclude (is_older, is_newer), 'added' as change from configurations_in where is_newer
     except select * exclude (is_older, is_newer), 'added' from configurations_in where is_older)
    union all
    (select * exclude (is_older, is_newer), 'removed' from configurations_in where is_older
     except select * exclude (is_older, is_newer), 'removed' from configurations_in where is_newer)
),

changed as (
    select
        p.older_snapshot_id, p.newer_snapshot_id, o.task, o.model_id, o.configuration, o.repeat, o.field,
        o.number_value as old_number, n.number_value as new_number, o.text_value as old_text, n.text_value as new_text,
        (n.number_value - o.number_value)
            / nullif(greatest(abs(o.number_value), abs(n.number_value)), 0) as relative_change
    from pairs as p
    join pair_values as o on o.snapshot_id = p.older_snapshot_id
    join pair_values as n using (task, model_id, configuration, repeat, field)
    cross join build_parameters as b
    where n.snapshot_id = p.newer_snapshot_id
        and ((o.number_value is null) != (n.number_value is null)
        or abs(n.number_value - o.number_value)
            > b.change_relative_tolerance * greatest(abs(o.number_value), abs(n.number_value))
        or o.text_value is distinct from n.text_value)
)

select *, null as field, null as old_value, null as new_value, null::double as relative_change
from added_or_removed
union all
select
    older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat, 'changed', field,
    coalesce(old_number::varchar, old_text), coalesce(new_number::varchar, new_text), relative_change
from changed;
