-- latency_metrics: view; the latency metrics a task family's configurations are limited and charted
-- by, in their order, with the words a person reads for each: the one list every view, export and
-- chart takes them from.
-- grain: one row per family × latency metric
-- key: latency_metric
create or replace view latency_metrics as

select * from (values
    ('token', 'median_itl_ms', 1, 'median inter-token latency (ms)', 'median ITL'),
    ('token', 'p90_itl_ms', 2, 'p90 inter-token latency (ms)', 'p90 ITL'),
    ('token', 'p99_itl_ms', 3, 'p99 inter-token latency (ms)', 'p99 ITL'),
    ('diffusion', 'batch_latency_s', 4, 'batch latency (s)', 'batch latency')
) as metric(family, latency_metric, metric_order, title, short_title);
