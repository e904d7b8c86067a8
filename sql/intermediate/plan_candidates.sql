-- plan_candidates: the index snapshot's configurations (configuration_points) as fleet_plan reads them,
-- each with what does not depend on the question: the model's mean output length on the task and the
-- configuration's deployment's efficiency curve.
-- grain: one row per task × configuration (row_id) of the index snapshot
-- key: task, row_id
-- mean_output_tokens is the mean of avg_output_tokens over the model's configurations on the task, on
-- every GPU, added in row_id order (a sum's last bit follows the order it adds in, so a question gives the
-- same bits with or without a GPU named). curve is the deployment's measured points on the GPU, ordered
-- by concurrency: each measured concurrency one point, configurations measured at the same one averaged,
-- as curve_neighbours reads a curve.
-- stored: the build keeps its rows as a table, computed once per build; plan reads it for every question,
-- and grouping the curves and the mean output lengths again for each question was a third of its work.
-- duckdb only: read by fleet_plan alone, a table macro, which Spark does not have.
create or replace view plan_candidates as

with
output_lengths as (
    select task, model_id, avg(avg_output_tokens order by row_id) as mean_output_tokens
    from configuration_points
    group by task, model_id
),

curve_points as (
    select task, model_id, gpu, deployment, measured_concurrency as x, avg(wh_per_unit) as wh_per_unit
    from configuration_points
    group by task, model_id, gpu, deployment, measured_concurrency
),

curves as (
    select task, model_id, gpu, deployment, list({x: x, point: wh_per_unit} order by x) as curve
    from curve_points
    group by task, model_id, gpu, deployment
)

select p.*, o.mean_output_tokens, c.curve
from configuration_points as p
join output_lengths as o using (task, model_id)
join curves as c
    on c.task = p.task and c.model_id = p.model_id and c.gpu = p.gpu and c.deployment is not distinct from p.deployment;
