-- token_configuration_label: macro naming what was measured for a token task, less the model.
-- grain: scalar macro
-- key: none
-- inputs:
create or replace macro token_configuration_label(gpu_model, num_gpus, max_num_seqs) as
    concat_ws('/', gpu_model, num_gpus, max_num_seqs);
