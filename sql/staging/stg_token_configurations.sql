-- stg_token_configurations: staging; every token task-file entry of every snapshot as the upstream
-- gave it, with what is derived from it once: its repeat, the average output length where the upstream
-- omits it, the model's slug and what was measured (configuration).
-- grain: one row per snapshot × token task file entry
-- key: snapshot_id, task, model_id, configuration, repeat
-- repeat: the entry's 1-based ordinal, in file order, among the model's entries with its configuration
-- (what was measured: schemas/dictionary.toml measured_key, as the label names it).
-- avg_output_len: the upstream defines energy per request as energy per token × average output length,
-- so where a snapshot predates the upstream's avg_output_len (2025-12-17) it is their quotient.
create or replace view stg_token_configurations as

with
labelled as (
    select
        *,
        model_slug(model_id) as slug,
        token_configuration_label(gpu_model, num_gpus, max_num_seqs) as configuration,
    from token_configurations
)

select
    snapshot_id,
    task,
    source_ordinal,
    row_number() over (partition by snapshot_id, task, model_id, configuration order by source_ordinal) as repeat,
    * exclude (
        snapshot_id, task, source_ordinal, slug, configuration, avg_output_len, energy_per_token_joules,
        energy_per_request_joules, median_itl_ms, p90_itl_ms, p95_itl_ms, p99_itl_ms, output_throughput_tokens_per_sec
    ),
    coalesce(avg_output_len, energy_per_request_joules / energy_per_token_joules) as avg_output_len,
    avg_output_len is null as is_avg_output_len_derived,
    energy_per_token_joules,
    energy_per_request_joules,
    median_itl_ms,
    p90_itl_ms,
    p95_itl_ms,
    p99_itl_ms,
    output_throughput_tokens_per_sec,
    slug,
    configuration,
from labelled;
