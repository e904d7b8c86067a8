-- configuration_curves: the index snapshot's configurations (configuration_points), each with its
-- deployment and its deployment's efficiency curve, and the model's mean output length on the task: what
-- energy_at_concurrency and fleet_plan read, none of it depending on the question asked.
-- grain: one row per task × configuration (row_id) of the index snapshot
-- key: task, row_id
-- The deployment is what stays fixed along an efficiency curve: GPU count, parallelism, precision and,
-- for diffusion, resolution, frames and steps. curve is the deployment's measured points on the GPU,
-- ordered by concurrency: each measured concurrency one point, configurations measured at the same one
-- averaged, as curve_neighbours reads a curve. mean_output_tokens is the mean of avg_output_tokens over
-- the model's configurations on the task, on every GPU, added in row_id order (a sum's last bit follows
-- the order it adds in, so a question gives the same bits with or without a GPU named).
-- stored: the build keeps its rows as a table, computed once per build; estimate and plan read it for
-- every question, and grouping the curves and the mean output lengths again for each question was a
-- third of plan's work.
-- duckdb only: read by energy_at_concurrency and fleet_plan alone, table macros, which Spark does not have.
create or replace view configuration_curves as

with
points as (
    select
        *,
        {
            num_gpus: num_gpus, tensor_parallel: tensor_parallel, data_parallel: data_parallel,
            expert_parallel: expert_parallel, ulysses_degree: ulysses_degree, ring_degree: ring_degree,
            precision: precision, width: width, height: height, num_frames: num_frames, fps: fps,
            inference_steps: inference_steps
        } as deployment
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
    select task, model_id, gpu, deployment, list({x: x, point: wh_per_unit} order by x) as curve
    from curve_points
    group by task, model_id, gpu, deployment
)

select p.*, o.mean_output_tokens, c.curve
from points as p
join output_lengths as o using (task, model_id)
join curves as c
    on c.task = p.task and c.model_id = p.model_id and c.gpu = p.gpu and c.deployment is not distinct from p.deployment;
