-- latency: distribution of each per-request latency over successful requests (status FINISH), per run.
-- For each of ttft, tpot, e2e, lag, tbt, queue (ns): count, mean, quantiles, max, in this column order.
-- mean = arithmetic mean; quantiles at 0.5, 0.9, 0.95, 0.99, 0.999 by quantile_cont (linear interpolation
-- between closest ranks, numpy's default method: the p-quantile of n sorted values x_0..x_{n-1} is x_h
-- interpolated at h = p * (n - 1)); max = largest. NULLs (e.g. TPOT of one-token requests) are left out, so
-- each metric has its own count.
SELECT run,
    count(ttft_ns), avg(ttft_ns), quantile_cont(ttft_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(ttft_ns),
    count(tpot_ns), avg(tpot_ns), quantile_cont(tpot_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(tpot_ns),
    count(e2e_ns), avg(e2e_ns), quantile_cont(e2e_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(e2e_ns),
    count(lag_ns), avg(lag_ns), quantile_cont(lag_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(lag_ns),
    count(tbt_ns), avg(tbt_ns), quantile_cont(tbt_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(tbt_ns),
    count(queue_ns), avg(queue_ns), quantile_cont(queue_ns, [0.5, 0.9, 0.95, 0.99, 0.999]), max(queue_ns)
FROM per_request WHERE status = 'FINISH'
GROUP BY run ORDER BY run;
