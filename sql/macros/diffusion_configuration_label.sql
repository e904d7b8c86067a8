-- diffusion_configuration_label: macro naming what was measured for a diffusion task, less the model:
-- gpu/num_gpus/batch/WxH[/<frames>f/<fps>fps]/<steps>steps/u<ulysses>r<ring>. The one identity format:
-- row_id is the slug, '/', and this.
create or replace macro diffusion_configuration_label(
    gpu_model, num_gpus, batch_size, width, height, num_frames, fps, inference_steps, ulysses_degree, ring_degree
) as
    concat_ws(
        '/', gpu_model, num_gpus, batch_size, width || 'x' || height, num_frames || 'f', fps || 'fps',
        inference_steps || 'steps', 'u' || ulysses_degree || 'r' || ring_degree
    );
