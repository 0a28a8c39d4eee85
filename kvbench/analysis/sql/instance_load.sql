-- instance_load: per instance and time bucket of $bucket_ns, from the simulator's steps table.
-- A steps row covers [t_ns, end_ns); it is split over the buckets it overlaps, weighted by overlap time:
--   utilisation = busy time (time covered by steps) / bucket length
--   batch       = time-weighted mean batch size while busy
--   kv_occupancy= time-weighted mean of kv_blocks_used / kv_blocks_total while busy (its value at the row start)
--   steps       = steps whose span overlaps the bucket, pro rata
WITH rows AS (
    SELECT run, instance, t_ns, end_ns, n_steps, batch, kv_blocks_used::DOUBLE / nullif(kv_blocks_total, 0) AS kv,
           unnest(range(t_ns // $bucket_ns, (end_ns - 1) // $bucket_ns + 1)) AS bucket
    FROM steps WHERE end_ns > t_ns
), cut AS (
    SELECT *, least(end_ns, (bucket + 1) * $bucket_ns) - greatest(t_ns, bucket * $bucket_ns) AS busy_ns FROM rows
)
SELECT run, instance, bucket, bucket * $bucket_ns AS t_ns, sum(busy_ns) / $bucket_ns AS utilisation,
       sum(batch * busy_ns) / nullif(sum(busy_ns), 0) AS batch, sum(kv * busy_ns) / nullif(sum(busy_ns), 0) AS kv_occupancy,
       sum(n_steps * busy_ns / (end_ns - t_ns)) AS steps
FROM cut GROUP BY run, instance, bucket ORDER BY run, instance, bucket;
