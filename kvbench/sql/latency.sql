-- latency: distribution of each per-request latency over successful requests (status FINISH), per run.
-- mean = arithmetic mean; pXX = quantile_cont (linear interpolation between closest ranks, numpy's default
-- method: the p-quantile of n sorted values x_0..x_{n-1} is x_h interpolated at h = p * (n - 1)); max = largest.
-- NULLs (e.g. TPOT of one-token requests) are left out, so each metric has its own count.
WITH long AS (
    UNPIVOT (SELECT run, ttft_ns, tpot_ns, e2e_ns, lag_ns, tbt_ns, queue_ns::DOUBLE AS queue_ns
             FROM per_request WHERE status = 'FINISH')
    ON ttft_ns, tpot_ns, e2e_ns, lag_ns, tbt_ns, queue_ns INTO NAME metric VALUE v
)
SELECT run, metric, count(v) AS count, avg(v) AS mean,
       quantile_cont(v, [0.5, 0.9, 0.95, 0.99, 0.999]) AS q, max(v) AS max
FROM long GROUP BY run, metric ORDER BY run, metric;
