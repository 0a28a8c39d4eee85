-- latency: distribution of each per-request latency over successful requests (status FINISH), per run.
-- For each per_request latency column X (ns): X_count, X_mean, X_q (the quantiles, a list), X_max.
-- mean = arithmetic mean (fractional columns summed as DECIMAL to the picosecond, so the result does not depend on
-- the order DuckDB's threads add them in); quantiles at $percentiles (0.5, 0.9, 0.95, 0.99, 0.999: catalogue.PERCENTILES) by
-- quantile_cont (linear interpolation between closest ranks, numpy's default method: the p-quantile of n sorted
-- values x_0..x_{n-1} is x_h interpolated at h = p * (n - 1)); max = largest. NULLs (e.g. TPOT of one-token
-- requests) are left out, so each metric has its own count.
SELECT run,
    count(ttft_ns) AS ttft_ns_count, avg(ttft_ns) AS ttft_ns_mean,
    quantile_cont(ttft_ns, $percentiles) AS ttft_ns_q, max(ttft_ns) AS ttft_ns_max,
    count(tpot_ns) AS tpot_ns_count, avg(tpot_ns::DECIMAL(38, 3))::DOUBLE AS tpot_ns_mean,
    quantile_cont(tpot_ns, $percentiles) AS tpot_ns_q, max(tpot_ns) AS tpot_ns_max,
    count(e2e_ns) AS e2e_ns_count, avg(e2e_ns) AS e2e_ns_mean,
    quantile_cont(e2e_ns, $percentiles) AS e2e_ns_q, max(e2e_ns) AS e2e_ns_max,
    count(lag_ns) AS lag_ns_count, avg(lag_ns) AS lag_ns_mean,
    quantile_cont(lag_ns, $percentiles) AS lag_ns_q, max(lag_ns) AS lag_ns_max,
    count(tbt_ns) AS tbt_ns_count, avg(tbt_ns::DECIMAL(38, 3))::DOUBLE AS tbt_ns_mean,
    quantile_cont(tbt_ns, $percentiles) AS tbt_ns_q, max(tbt_ns) AS tbt_ns_max,
    count(queue_ns) AS queue_ns_count, avg(queue_ns) AS queue_ns_mean,
    quantile_cont(queue_ns, $percentiles) AS queue_ns_q, max(queue_ns) AS queue_ns_max
FROM per_request WHERE status = 'FINISH'
GROUP BY run ORDER BY run;
