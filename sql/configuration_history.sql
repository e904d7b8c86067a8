-- configuration_history: every measured token-task configuration of every snapshot, in the index's
-- vocabulary, with derived units.
-- grain: one row per snapshot × task × model × GPU × GPU count × max_num_seqs × repeat
-- key: (snapshot_id, task, model_id, gpu, num_gpus, max_num_seqs, repeat)
-- inputs: token_configurations, build_parameters
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
        concat_ws('/', renamed.slug, renamed.gpu, renamed.num_gpus, renamed.max_num_seqs) as row_id,
    from renamed
    cross join parameters
)

select * from flagged;

comment on view configuration_history is 'Every measured token-task configuration of every snapshot with derived units. One row per snapshot × task × model × GPU × GPU count × max_num_seqs × repeat.';
comment on column configuration_history.snapshot_id is 'Snapshot the row was read from.';
comment on column configuration_history.task is 'Upstream task identifier, e.g. lm-arena-chat.';
comment on column configuration_history.model_id is 'Hugging Face model id.';
comment on column configuration_history.slug is 'Part of model_id after the last "/", lower-cased: the exported file name.';
comment on column configuration_history.gpu is 'GPU model, e.g. H100.';
comment on column configuration_history.num_gpus is 'GPUs serving the model.';
comment on column configuration_history.tensor_parallel is 'Tensor-parallel degree (the upstream''s old 0 read as 1).';
comment on column configuration_history.data_parallel is 'Data-parallel degree (the upstream''s old 0 read as 1).';
comment on column configuration_history.expert_parallel is 'Expert-parallel degree (the upstream''s old 0 read as 1).';
comment on column configuration_history.weight_precision is 'Weight precision as the upstream spells it.';
comment on column configuration_history.precision is 'Weight precision as the index prints it: BF16, FP8, MXFP4.';
comment on column configuration_history.max_num_seqs is 'vLLM max_num_seqs: the cap on requests in flight.';
comment on column configuration_history.repeat is '1-based ordinal among measurements of one configuration, in file order.';
comment on column configuration_history.source_ordinal is '0-based position of the entry in its task file.';
comment on column configuration_history.avg_batch_size is 'Average running batch = average requests in flight.';
comment on column configuration_history.joules_per_output_token is 'Steady-state GPU energy per output token, joules.';
comment on column configuration_history.wh_per_million_output_tokens is 'joules_per_output_token × 1e6 / 3600: Wh per million output tokens.';
comment on column configuration_history.energy_per_request_joules is 'Energy per token × average output length, joules.';
comment on column configuration_history.avg_output_tokens is 'Average output tokens per request.';
comment on column configuration_history.is_avg_output_len_derived is 'True where avg_output_tokens was derived as energy per request ÷ energy per token.';
comment on column configuration_history.median_itl_ms is 'Median inter-token latency, ms.';
comment on column configuration_history.p90_itl_ms is 'p90 inter-token latency, ms.';
comment on column configuration_history.p95_itl_ms is 'p95 inter-token latency, ms.';
comment on column configuration_history.p99_itl_ms is 'p99 inter-token latency, ms.';
comment on column configuration_history.tokens_per_second is 'Steady-state output throughput, tokens/s.';
comment on column configuration_history.gpu_power_watts_total is 'Average total power of all the GPUs, watts.';
comment on column configuration_history.under_itl_deadline is 'median_itl_ms <= build_parameters.itl_deadline_ms.';
comment on column configuration_history.row_id is 'slug/gpu/num_gpus/max_num_seqs; repeat tells two measurements of one row_id apart.';
