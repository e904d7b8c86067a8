-- configuration_curves: the index snapshot's configurations (configuration_points), each with its
-- deployment's efficiency curve and the model's mean output length on the task: what fleet_plan reads,
-- none of it depending on the question asked.
-- grain: one row per task × configuration (row_id) of the index snapshot
-- key: task, row_id
-- The deployment is what stays fixed along an efficiency curve: GPU count, parallelism, precision and,
-- for diffusion, resolution, frames and steps. curve is the deployment's measured points on the GPU as
-- text, 'x:wh_per_unit,x:wh_per_unit,...' ordered by the concurrency x: each measured concurrency one
-- point, configurations measured at the same one averaged. Text, not a list: BI tools type no nested
-- column, and DuckDB writes each double as the shortest text that reads back as the same bits
-- (curve_points_of reads it). mean_output_tokens is the mean of avg_output_tokens over the model's
-- configurations on the task, on every GPU, added in row_id order (a sum's last bit follows the order it
-- adds in, so a question gives the same bits with or without a GPU named).
-- stored: the build keeps its rows as a table, computed once per build; plan reads it for every question,
-- and grouping the curves and the mean output lengths again for each question was a third of its work.
-- duckdb only: read by fleet_plan alone, a table macro, which Spark does not have.
create or replace view configuration_curves as

with
points as (
    select
        *,
        deployment_of(
            num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision, width,
            height, num_frames, fps, inference_steps
        ) as deployment
    from configuration_points
),

output_lengths as (
    select task, model_id, avg(avg_output_tokens order by row_id) as mean_output_tokens
    from points
    group by task, model_id
),

curve_points as (
    select task, model_id, gpu, deployment, measured_concurrency as x, avg(wh_per_unit) as wh_per_unit
    from points
    group by task, model_id, gpu, deployment, measured_concurrency
),

curves as (
    select
        task, model_id, gpu, deployment,
        string_agg(cast(x as varchar) || ':' || cast(wh_per_unit as varchar), ',' order by x) as curve
    from curve_points
    group by task, model_id, gpu, deployment
)

select p.* exclude (deployment), o.mean_output_tokens, c.curve
from points as p
join output_lengths as o using (task, model_id)
join curves as c
    on c.task = p.task and c.model_id = p.model_id and c.gpu = p.gpu and c.deployment is not distinct from p.deployment;
