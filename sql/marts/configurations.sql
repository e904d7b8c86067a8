-- configurations: the index snapshot's token-task configurations with derived units.
-- grain: one row per task × model × GPU × GPU count × max_num_seqs × repeat
-- key: task, model_id, gpu, num_gpus, max_num_seqs, repeat
create or replace view configurations as

select history.*
from configuration_history as history
-- on, not using: after a using join Spark puts snapshot_id first in history.*
join index_snapshot on index_snapshot.snapshot_id = history.snapshot_id;
