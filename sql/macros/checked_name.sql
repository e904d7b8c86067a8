-- checked_name: macro; the name when it is one of the names (or null), else an error naming it and the
-- nearest names: checked_name('model', 'Qwen/Qwen3-8', ['Qwen/Qwen3-8B']) fails with
-- "unknown model 'Qwen/Qwen3-8'; the nearest: Qwen/Qwen3-8B". The table macros check every
-- identifier they are given with it, so that a misspelt one is an error, not an empty or all-new answer.
create or replace macro checked_name(kind, name, names) as
    case
        when name is null or list_contains(names, name::varchar) then name::varchar
        else error(format('unknown {} ''{}''; the nearest: {}', kind, name::varchar, closest_names(name, names)))
    end;
