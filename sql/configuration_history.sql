-- configuration_history: every measured token-task configuration of every snapshot, in the index's
-- vocabulary, with derived units.
-- grain: one row per snapshot × task × model × GPU × GPU count × max_num_seqs × repeat
-- key: (snapshot_id, task, model_id, gpu, num_gpus, max_num_seqs, repeat)
-- inputs: token_configurations, build_parameters, token_configuration_label
create or replace view configuration_history as

with

measured as (
    select * from token_configurations
),

parameters as (
    select itl_deadline_ms from build_parameters
),

renamed as (
    select
        snapshot_id,
        task,
        model_id,
        lower(regexp_extract(model_id, '[^/]*$')) as slug,
        gpu_model as gpu,
        num_gpus,
        -- The upstream spelled "not set" as 0 before 2025-12-15; not set means a degree of 1.
        case when tensor_parallel = 0 then 1 else tensor_parallel end as tensor_parallel,
        case when data_parallel = 0 then 1 else data_parallel end as data_parallel,
        case when expert_parallel = 0 then 1 else expert_parallel end as expert_parallel,
        weight_precision,
        case weight_precision when 'bfloat16' then 'BF16' else upper(weight_precision) end as precision,
        max_num_seqs,
        repeat,
        source_ordinal,
        avg_batch_size,
        energy_per_token_joules as joules_per_output_token,
        energy_per_token_joules * 1e6 / 3600 as wh_per_million_output_tokens,
        energy_per_request_joules,
        avg_output_len as avg_output_tokens,
        is_avg_output_len_derived,
        median_itl_ms,
        p90_itl_ms,
        p95_itl_ms,
        p99_itl_ms,
        output_throughput_tokens_per_sec as tokens_per_second,
        avg_power_watts as gpu_power_watts_total,
    from measured
),

flagged as (
    select
        renamed.*,
        renamed.median_itl_ms <= parameters.itl_deadline_ms as under_itl_deadline,
        renamed.slug || '/' || token_configuration_label(renamed.gpu, renamed.num_gpus, renamed.max_num_seqs) as row_id,
    from renamed
    cross join parameters
)

select * from flagged;
