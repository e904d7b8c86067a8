-- configuration_latencies: every configuration of every snapshot (unified_configurations) once per
-- latency metric of its family (latency_metrics), with that metric's value: what the latency tiers,
-- the frontier and the EcoLogits refit limit or chart.
-- grain: one row per snapshot × task file entry × latency metric
-- key: snapshot_id, task, row_id, repeat, latency_metric
create or replace view configuration_latencies as

select
    c.*,
    m.latency_metric,
    case m.latency_metric
        when 'median_itl_ms' then c.median_itl_ms
        when 'p90_itl_ms' then c.p90_itl_ms
        when 'p99_itl_ms' then c.p99_itl_ms
        when 'batch_latency_s' then c.batch_latency_s
    end as latency
from unified_configurations as c
join latency_metrics as m on m.family = c.family;
