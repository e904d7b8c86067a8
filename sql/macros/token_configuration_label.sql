-- token_configuration_label: macro naming what was measured for a token task, less the model:
-- gpu/num_gpus/max_num_seqs. The one identity format: row_id is the slug, '/', and this.
create or replace macro token_configuration_label(gpu_model, num_gpus, max_num_seqs) as
    concat_ws('/', gpu_model, num_gpus, max_num_seqs);
