-- closest_names: macro; the three names of a list nearest to a name, as text for an error message:
-- names that begin with the given text (a snapshot id's date) first, then names that contain it (a task's
-- last word), then by edit distance to the whole name or to its last path segment (a model id as its
-- slug), ignoring case.
create or replace macro closest_names(name, names) as (
    select string_agg(candidate, ', ' order by distance, candidate)
    from (
        select
            candidate,
            least(
                levenshtein(lower(candidate), lower(name::varchar)),
                levenshtein(lower(regexp_extract(candidate, '[^/]*$')), lower(name::varchar))
            ) - case
                when starts_with(lower(candidate), lower(name::varchar)) then 1000
                when contains(lower(candidate), lower(name::varchar)) then 500
                else 0
            end as distance,
        from (select distinct unnest(names) as candidate)
        order by distance, candidate
        limit 3
    )
);
