-- configuration_history: every measured token-task configuration of every snapshot, in the index's
-- vocabulary, with derived units.
-- grain: one row per snapshot × task × model × GPU × GPU count × max_num_seqs × repeat
-- key: snapshot_id, task, model_id, gpu, num_gpus, max_num_seqs, repeat
create or replace view configuration_history as

select
    snapshot_id, task, model_id, slug, gpu_model as gpu, num_gpus,
    parallel_degree(tensor_parallel) as tensor_parallel,
    parallel_degree(data_parallel) as data_parallel,
    parallel_degree(expert_parallel) as expert_parallel,
    weight_precision, precision_label(weight_precision) as precision, max_num_seqs, repeat, source_ordinal,
    avg_batch_size,
    energy_per_token_joules as joules_per_output_token,
    wh_from_joules(energy_per_token_joules * 1e6) as wh_per_million_output_tokens,
    energy_per_request_joules, avg_output_len as avg_output_tokens, is_avg_output_len_derived,
    median_itl_ms, p90_itl_ms, p95_itl_ms, p99_itl_ms,
    output_throughput_tokens_per_sec as tokens_per_second,
    avg_power_watts as gpu_power_watts_total,
    median_itl_ms <= (select itl_deadline_ms from build_parameters) as under_itl_deadline,
    slug || '/' || configuration as row_id
from stg_token_configurations;
