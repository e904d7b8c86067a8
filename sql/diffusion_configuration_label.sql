-- diffusion_configuration_label: macro naming what was measured for a diffusion task, less the model.
-- grain: scalar macro
-- key: none
-- inputs:
create or replace macro diffusion_configuration_label(
    gpu_model, num_gpus, batch_size, width, height, num_frames, fps, inference_steps, ulysses_degree, ring_degree
) as
    concat_ws(
        '/', gpu_model, num_gpus, batch_size, width || 'x' || height, num_frames, fps, inference_steps,
        'ulysses' || ulysses_degree, 'ring' || ring_degree
    );
