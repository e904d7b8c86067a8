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

-- Each field of each configuration with its two snapshots' values side by side, from one read of
-- configuration_values: DuckDB before 1.3 reads a CTE again wherever it is named, and a self-join and
-- four set operations over the two snapshots' values took DuckDB 1.1 2.5 s on the eleven snapshots.
fields as (
    select
        p.older_snapshot_id, p.newer_snapshot_id, v.task, v.model_id, v.configuration, v.repeat, v.field,
        bool_or(v.snapshot_id = p.older_snapshot_id) as in_older,
        bool_or(v.snapshot_id = p.newer_snapshot_id) as in_newer,
        max(v.number_value) filter (where v.snapshot_id = p.older_snapshot_id) as old_number,
        max(v.number_value) filter (where v.snapshot_id = p.newer_snapshot_id) as new_number,
        max(v.text_value) filter (where v.snapshot_id = p.older_snapshot_id) as old_text,
        max(v.text_value) filter (where v.snapshot_id = p.newer_snapshot_id) as new_text
    from pair_values as v
    cross join pairs as p
    group by all
),

added_or_removed as (
    select
        older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat,
        case when bool_or(in_newer) then 'added' else 'removed' end as change
    from fields
    group by all
    having bool_or(in_older) != bool_or(in_newer)
),

changed as (
    select
        f.older_snapshot_id, f.newer_snapshot_id, f.task, f.model_id, f.configuration, f.repeat, f.field,
        f.old_number, f.new_number, f.old_text, f.new_text,
        (f.new_number - f.old_number)
            / nullif(greatest(abs(f.old_number), abs(f.new_number)), 0) as relative_change
    from fields as f
    cross join build_parameters as b
    where f.in_older and f.in_newer
        and ((f.old_number is null) != (f.new_number is null)
        or abs(f.new_number - f.old_number)
            > b.change_relative_tolerance * greatest(abs(f.old_number), abs(f.new_number))
        or f.old_text is distinct from f.new_text)
)

select *, null as field, null as old_value, null as new_value, null::double as relative_change
from added_or_removed
union all
select
    older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat, 'changed', field,
    coalesce(old_number::varchar, old_text), coalesce(new_number::varchar, new_text), relative_change
from changed;
