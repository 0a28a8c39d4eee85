-- run_totals: counts, duration, throughput and SLO figures per run.
--   duration_ns = last terminal event - first ARRIVE (last event of any kind when no request ended); an interrupted
--   run's CANCEL events are stamped at the interruption, so it ends there
--   request_throughput = finished / duration;  output_token_throughput = output tokens of finished / duration;
--   total_token_throughput = (input + output tokens of finished) / duration
--   slo_attainment = good / (requests - interrupted_unsent): every request in the log but those an interruption
--   cancelled before they were sent (errors, rejections, other cancellations and requests still running at the
--   end count as not good);  goodput = good / duration
--   prefix_hit_ratio = sum(cached_tokens) / sum(input_tokens) over finished requests reporting cached_tokens;
--   trace_hit_ratio = sum(trace_reuse_tokens) / sum(input_tokens) over finished requests that have it
WITH span AS (
    SELECT run, min(arrival_ns) FILTER (WHERE arrived) AS t0,
           coalesce(max(end_ns), max(last_event_ns)) AS t1
    FROM per_request GROUP BY run
),
counts AS (
    SELECT run, count(*) AS requests,
        count(*) FILTER (WHERE status = 'FINISH') AS finished,
        count(*) FILTER (WHERE status = 'ERROR') AS errors,
        count(*) FILTER (WHERE status = 'REJECT') AS rejected,
        count(*) FILTER (WHERE status = 'CANCEL') AS cancelled,
        count(*) FILTER (WHERE status = 'RUNNING') AS running,
        count(*) FILTER (WHERE good) AS good,
        count(*) FILTER (WHERE NOT interrupted_unsent) AS offered,
        count(*) FILTER (WHERE status = 'FINISH' AND output_tokens = 1) AS one_token,
        coalesce(sum(input_tokens) FILTER (WHERE status = 'FINISH'), 0)::BIGINT AS input_tokens,
        coalesce(sum(output_tokens) FILTER (WHERE status = 'FINISH'), 0)::BIGINT AS output_tokens,
        sum(cached_tokens) FILTER (WHERE status = 'FINISH')::BIGINT AS cached_tokens,
        sum(input_tokens) FILTER (WHERE status = 'FINISH' AND cached_tokens IS NOT NULL)::BIGINT AS cached_of,
        sum(trace_reuse_tokens) FILTER (WHERE status = 'FINISH')::BIGINT AS trace_reuse_tokens,
        sum(input_tokens) FILTER (WHERE status = 'FINISH' AND trace_reuse_tokens IS NOT NULL)::BIGINT AS trace_of,
        sum(preemptions)::BIGINT AS preemptions, count(*) FILTER (WHERE preemptions > 0) AS preempted,
        sum(migrations)::BIGINT AS migrations
    FROM per_request GROUP BY run
)
SELECT c.*, coalesce(s.t1 - s.t0, 0) AS duration_ns,
    c.finished / nullif(s.t1 - s.t0, 0) AS finished_per_ns,
    c.output_tokens / nullif(s.t1 - s.t0, 0) AS output_tokens_per_ns,
    (c.input_tokens + c.output_tokens) / nullif(s.t1 - s.t0, 0) AS total_tokens_per_ns,
    c.good / nullif(c.offered, 0) AS slo_attainment,
    c.good / nullif(s.t1 - s.t0, 0) AS good_per_ns,
    c.cached_tokens / nullif(c.cached_of, 0) AS prefix_hit_ratio,
    c.trace_reuse_tokens / nullif(c.trace_of, 0) AS trace_hit_ratio
FROM counts c LEFT JOIN span s ON c.run = s.run ORDER BY c.run;
