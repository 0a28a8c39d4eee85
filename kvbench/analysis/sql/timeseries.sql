-- timeseries: per run and time bucket of $bucket_ns (bucket b covers [b * $bucket_ns, (b + 1) * $bucket_ns)).
--   arrivals   = requests whose intended arrival falls in the bucket
--   finished / errors = requests whose terminal event is FINISH / ERROR, REJECT or CANCEL, in the bucket
--   in_flight  = requests arrived and not yet ended at the bucket's end (running requests never end)
--   output_tokens = output tokens of the requests finishing in the bucket (throughput = that / bucket length)
--   ttft/tpot p50, p99 = quantile_cont over the finished requests that ARRIVED in the bucket (latency as a
--   function of when the load came); good = those meeting the SLOs (of the arrivals in the bucket)
--   hit_ratio / trace_hit_ratio = cached / prompt and trace-implied / prompt tokens of finished requests arrived
--   Requests an interruption cancelled before they were sent (interrupted_unsent) are left out: they were not
--   offered, and their intended arrivals would stretch the series past the interruption.
WITH b AS (
    SELECT run, arrival_ns // $bucket_ns AS a_b, end_ns // $bucket_ns AS e_b, * EXCLUDE (run) FROM per_request
    WHERE NOT interrupted_unsent
), span AS (
    SELECT run, unnest(range(min(a_b), greatest(max(a_b), coalesce(max(e_b), 0)) + 1)) AS bucket
    FROM b GROUP BY run
), by_arrival AS (
    SELECT run, a_b AS bucket, count(*) AS arrivals, count(*) FILTER (WHERE good) AS good,
        sum(cached_tokens) FILTER (WHERE status = 'FINISH')
            / nullif(sum(input_tokens) FILTER (WHERE status = 'FINISH' AND cached_tokens IS NOT NULL), 0) AS hit_ratio,
        sum(trace_reuse_tokens) FILTER (WHERE status = 'FINISH')
            / nullif(sum(input_tokens) FILTER (WHERE status = 'FINISH' AND trace_reuse_tokens IS NOT NULL), 0)
            AS trace_hit_ratio
    FROM b GROUP BY run, a_b
), latency AS (
    SELECT run, a_b AS bucket, quantile_cont(ttft_ns, [0.5, 0.99]) AS ttft_q, quantile_cont(tpot_ns, [0.5, 0.99]) AS tpot_q
    FROM b WHERE status = 'FINISH' GROUP BY run, a_b
), by_end AS (
    SELECT run, e_b AS bucket, count(*) FILTER (WHERE status = 'FINISH') AS finished,
        count(*) FILTER (WHERE status IN ('ERROR', 'REJECT', 'CANCEL')) AS errors,
        coalesce(sum(output_tokens) FILTER (WHERE status = 'FINISH'), 0) AS output_tokens
    FROM b WHERE e_b IS NOT NULL GROUP BY run, e_b
)
SELECT s.run, s.bucket, s.bucket * $bucket_ns AS t_ns,
    coalesce(a.arrivals, 0) AS arrivals, coalesce(e.finished, 0) AS finished, coalesce(e.errors, 0) AS errors,
    (sum(coalesce(a.arrivals, 0)) OVER w - sum(coalesce(e.finished, 0) + coalesce(e.errors, 0)) OVER w)::BIGINT
        AS in_flight,
    coalesce(e.output_tokens, 0)::BIGINT AS output_tokens, coalesce(a.good, 0) AS good,
    l.ttft_q[1] AS ttft_p50_ns, l.ttft_q[2] AS ttft_p99_ns, l.tpot_q[1] AS tpot_p50_ns, l.tpot_q[2] AS tpot_p99_ns,
    a.hit_ratio, a.trace_hit_ratio
FROM span s LEFT JOIN by_arrival a ON s.run = a.run AND s.bucket = a.bucket
LEFT JOIN by_end e ON s.run = e.run AND s.bucket = e.bucket
LEFT JOIN latency l ON s.run = l.run AND s.bucket = l.bucket
WINDOW w AS (PARTITION BY s.run ORDER BY s.bucket ROWS UNBOUNDED PRECEDING)
ORDER BY s.run, s.bucket;
