-- stg_token_configurations: staging; every token task-file entry of every snapshot as the upstream
-- gave it, with its identity derived once: the model's slug and what was measured (configuration).
-- grain: one row per snapshot × token task file entry
-- key: (snapshot_id, task, model_id, configuration, repeat)
create or replace view stg_token_configurations as

select
    *,
    model_slug(model_id) as slug,
    token_configuration_label(gpu_model, num_gpus, max_num_seqs) as configuration,
from token_configurations;
