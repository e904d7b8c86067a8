-- configuration_values: every upstream value of every configuration of every snapshot, one per row.
-- grain: one row per snapshot × task × model × configuration × repeat × field
-- key: snapshot_id, task, model_id, configuration, repeat, field
-- The long shape lets one comparison cover every field of both families; pipeline columns
-- (source_ordinal, is_avg_output_len_derived) are left out because they are not upstream values.
-- include nulls: a field that is null (or absent upstream) is still a value to compare.
create or replace view configuration_values as

with
token_numbers as (
    select
        snapshot_id, task, model_id, configuration, repeat,
        total_params_billions::double as total_params_billions,
        activated_params_billions::double as activated_params_billions,
        tensor_parallel::double as tensor_parallel, data_parallel::double as data_parallel,
        expert_parallel::double as expert_parallel, max_num_batched_tokens::double as max_num_batched_tokens,
        avg_batch_size::double as avg_batch_size, avg_output_len::double as avg_output_len,
        avg_power_watts::double as avg_power_watts, energy_per_token_joules::double as energy_per_token_joules,
        energy_per_request_joules::double as energy_per_request_joules, median_itl_ms::double as median_itl_ms,
        p90_itl_ms::double as p90_itl_ms, p95_itl_ms::double as p95_itl_ms, p99_itl_ms::double as p99_itl_ms,
        output_throughput_tokens_per_sec::double as output_throughput_tokens_per_sec
    from stg_token_configurations
),

diffusion_numbers as (
    select
        snapshot_id, task, model_id, configuration, repeat,
        total_params_billions::double as total_params_billions,
        activated_params_billions::double as activated_params_billions,
        avg_power_watts::double as avg_power_watts, batch_latency_s::double as batch_latency_s,
        energy_per_image_joules::double as energy_per_image_joules,
        energy_per_video_joules::double as energy_per_video_joules,
        throughput_images_per_sec::double as throughput_images_per_sec,
        throughput_videos_per_sec::double as throughput_videos_per_sec
    from stg_diffusion_configurations
),

texts as (
    select snapshot_id, task, model_id, configuration, repeat, nickname, architecture, weight_precision, extra_fields
    from stg_token_configurations
    union all
    select
        snapshot_id, task, model_id, configuration, repeat, nickname, null::varchar, weight_precision, extra_fields
    from stg_diffusion_configurations
)

select snapshot_id, task, model_id, configuration, repeat, field, number_value, null::varchar as text_value
from token_numbers
unpivot include nulls (
    number_value for field in (
        total_params_billions, activated_params_billions, tensor_parallel, data_parallel, expert_parallel,
        max_num_batched_tokens, avg_batch_size, avg_output_len, avg_power_watts, energy_per_token_joules,
        energy_per_request_joules, median_itl_ms, p90_itl_ms, p95_itl_ms, p99_itl_ms, output_throughput_tokens_per_sec
    )
)
union all
select snapshot_id, task, model_id, configuration, repeat, field, number_value, null::varchar as text_value
from diffusion_numbers
unpivot include nulls (
    number_value for field in (
        total_params_billions, activated_params_billions, avg_power_watts, batch_latency_s,
        energy_per_image_joules, energy_per_video_joules, throughput_images_per_sec, throughput_videos_per_sec
    )
)
union all
select snapshot_id, task, model_id, configuration, repeat, field, null::double as number_value, text_value
from texts
unpivot include nulls (text_value for field in (nickname, architecture, weight_precision, extra_fields));
