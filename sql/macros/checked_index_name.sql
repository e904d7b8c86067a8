-- checked_index_name: macro; a task, model id or GPU name (kind 'task', 'model' or 'GPU') when the index
-- snapshot has a configuration of it (or null), else an error naming it and the nearest names:
-- select checked_index_name('model', 'Qwen/Qwen3-8') fails with "unknown model 'Qwen/Qwen3-8'; the
-- nearest: Qwen/Qwen3-8B, ...".
create or replace macro checked_index_name(kind, name) as
    checked_name(kind, name, (
        -- unified_configurations' names from its two tables: planning the view took longer than the scan.
        select list(distinct case lower(kind) when 'task' then task when 'model' then model_id else gpu_model end)
        from (
            select snapshot_id, task, model_id, gpu_model from token_configurations
            union all
            select snapshot_id, task, model_id, gpu_model from diffusion_configurations
        )
        where snapshot_id in (select snapshot_id from index_snapshot)
    ));
