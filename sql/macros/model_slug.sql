-- model_slug: macro; a model's file name in the index: its id's last path segment, lower-cased
-- (Qwen/Qwen3-8B -> qwen3-8b). The export refuses two models of one task with one slug.
create or replace macro model_slug(model_id) as lower(regexp_extract(model_id, '[^/]*$'));
