-- diffusion_configurations_current: the index snapshot's diffusion configurations with derived units.
-- grain: one row per diffusion task file entry of the index snapshot
-- key: task, row_id, repeat
create or replace view diffusion_configurations_current as

select history.*
from diffusion_configuration_history as history
-- on, not using: after a using join Spark puts snapshot_id first in history.*
join index_snapshot on index_snapshot.snapshot_id = history.snapshot_id;
