-- cache_instances: prefix hit ratio per instance = sum(cached_tokens) / sum(input_tokens) of the finished requests
-- prefilled there (PREFILL_START's instance, else FIRST_TOKEN's), trace-implied ratio beside it.
SELECT run, instance, count(*) AS requests,
       sum(cached_tokens) / nullif(sum(input_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS hit_ratio,
       sum(trace_reuse_tokens) / nullif(sum(input_tokens) FILTER (WHERE trace_reuse_tokens IS NOT NULL), 0)
           AS trace_hit_ratio
FROM per_request WHERE status = 'FINISH' AND instance IS NOT NULL
GROUP BY run, instance ORDER BY run, instance;
