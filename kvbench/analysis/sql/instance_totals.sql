-- instance_totals: per instance over the whole run, from the steps table (simulator only):
--   utilisation = busy time / run duration ($duration_ns, first ARRIVE to last terminal event);
--   batch, kv_occupancy = time-weighted means while busy; kv_occupancy_max = largest kv_blocks_used / total.
--   (the fractional sum is a DECIMAL, so the result does not depend on the order threads add the parts in)
SELECT run, instance, sum(end_ns - t_ns) / nullif($duration_ns, 0) AS utilisation,
       sum(n_steps)::BIGINT AS steps, sum(batch * (end_ns - t_ns)) / nullif(sum(end_ns - t_ns), 0) AS batch,
       sum((kv_blocks_used::DOUBLE / nullif(kv_blocks_total, 0) * (end_ns - t_ns))::DECIMAL(38, 3))::DOUBLE
           / nullif(sum(end_ns - t_ns), 0) AS kv_occupancy,
       max(kv_blocks_used::DOUBLE / nullif(kv_blocks_total, 0)) AS kv_occupancy_max
FROM steps WHERE run = $run AND end_ns > t_ns
GROUP BY run, instance ORDER BY run, instance;
