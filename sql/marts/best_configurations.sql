-- best_configurations: the index snapshot's lowest-energy configuration per model and GPU within the deadline.
-- grain: one row per task × model × GPU that has a configuration under the deadline
-- key: task, model_id, gpu
create or replace view best_configurations as

select history.*
from best_configuration_history as history
-- on, not using: after a using join Spark puts snapshot_id first in history.*
join index_snapshot on index_snapshot.snapshot_id = history.snapshot_id;
