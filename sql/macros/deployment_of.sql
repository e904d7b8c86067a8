-- deployment_of: macro; what stays fixed along an efficiency curve, one struct to group and join the
-- configurations of one curve by: GPU count, parallelism, precision and, for diffusion, resolution,
-- frames and steps (null where a family has no such part).
create or replace macro deployment_of(
    num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, ring_degree, precision_name,
    width, height, num_frames, fps, inference_steps
) as {
    num_gpus: num_gpus, tensor_parallel: tensor_parallel, data_parallel: data_parallel,
    expert_parallel: expert_parallel, ulysses_degree: ulysses_degree, ring_degree: ring_degree,
    precision: precision_name, width: width, height: height, num_frames: num_frames, fps: fps,
    inference_steps: inference_steps
};
