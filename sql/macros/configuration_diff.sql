-- configuration_diff: table macro; for two snapshots, the configurations added and removed and every
-- upstream field whose value changed: select * from configuration_diff('<older id>', '<newer id>').
-- grain: one row per configuration added or removed, or per configuration × changed field
-- key: (task, model_id, configuration, repeat, field)
-- A macro, not a view over every pair: its cost is that of the two snapshots' rows, whatever the history.
-- Numbers compare with build_parameters.change_relative_tolerance so that re-serialising a float
-- (e.g. the upstream's derived average output length) is not a change; a null against a value is.
-- An id the database does not hold is an error naming it and the nearest ids, not every row added.
create or replace macro configuration_diff(older_id, newer_id) as table

with

pairs as (
    select checked_snapshot_id(older_id) as older_snapshot_id, checked_snapshot_id(newer_id) as newer_snapshot_id
),

tolerance as (
    select change_relative_tolerance from build_parameters
),

pair_values as (
    select * from configuration_values
    where snapshot_id in (select older_snapshot_id from pairs union all select newer_snapshot_id from pairs)
),

configurations_in as (
    select distinct snapshot_id, task, model_id, configuration, repeat from pair_values
),

older_configurations as (
    select p.*, c.task, c.model_id, c.configuration, c.repeat
    from pairs as p
    join configurations_in as c on c.snapshot_id = p.older_snapshot_id
),

newer_configurations as (
    select p.*, c.task, c.model_id, c.configuration, c.repeat
    from pairs as p
    join configurations_in as c on c.snapshot_id = p.newer_snapshot_id
),

added as (
    select * from newer_configurations
    except
    select * from older_configurations
),

removed as (
    select * from older_configurations
    except
    select * from newer_configurations
),

field_pairs as (
    select
        p.older_snapshot_id,
        p.newer_snapshot_id,
        o.task,
        o.model_id,
        o.configuration,
        o.repeat,
        o.field,
        o.number_value as old_number,
        n.number_value as new_number,
        o.text_value as old_text,
        n.text_value as new_text,
    from pairs as p
    join pair_values as o on o.snapshot_id = p.older_snapshot_id
    join pair_values as n
        on n.snapshot_id = p.newer_snapshot_id
        and n.task = o.task
        and n.model_id = o.model_id
        and n.configuration = o.configuration
        and n.repeat = o.repeat
        and n.field = o.field
),

changed as (
    select
        field_pairs.*,
        (new_number - old_number) / nullif(greatest(abs(old_number), abs(new_number)), 0) as relative_change,
    from field_pairs
    cross join tolerance
    where (old_number is null) != (new_number is null)
        or abs(new_number - old_number) > tolerance.change_relative_tolerance * greatest(abs(old_number), abs(new_number))
        or old_text is distinct from new_text
),

diffs as (
    select older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat,
           'added' as change, null as field, null as old_value, null as new_value, null::double as relative_change,
    from added
    union all
    select older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat,
           'removed', null, null, null, null,
    from removed
    union all
    select older_snapshot_id, newer_snapshot_id, task, model_id, configuration, repeat,
           'changed', field,
           coalesce(old_number::varchar, old_text), coalesce(new_number::varchar, new_text), relative_change,
    from changed
)

select * from diffs;
