-- index_uncertainty: how sure each index figure is: how many times its configuration was measured and
-- how far its repeats lie apart, and how close the next-best configuration within the same latency
-- limit comes (the margin by which the index's choice was made).
-- grain: one row per best_configurations row
-- key: task, model_id, gpu
-- The index snapshot's rows of index_history, which computes them for every snapshot: the runner-up
-- (index_runner_ups) is ranked as the index ranks (unified_configurations' preference), among the other
-- configurations within the limit. A runner-up as cheap as the index row is a tie (margin 0,
-- choice_basis says the tie rule decided); a model and GPU with one configuration within the limit
-- has no runner-up and no margin.
create or replace view index_uncertainty as

select
    h.snapshot_id, h.family, h.task, h.model_id, h.slug, h.gpu, h.row_id, h.repeat, h.unit_label, h.n_repeats,
    h.wh_per_unit, h.wh_repeat_min, h.wh_repeat_max, h.runner_up_row_id, h.runner_up_wh_per_unit,
    h.margin_wh_per_unit, h.margin_relative, h.choice_basis
from index_history as h
join index_snapshot on index_snapshot.snapshot_id = h.snapshot_id;
